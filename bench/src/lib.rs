//! kiln benchmarks. Not built yet (benchmark issue).

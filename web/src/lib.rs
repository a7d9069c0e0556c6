//! Browser (wasm + WebGPU) front end of kiln. Not built yet (web issue).

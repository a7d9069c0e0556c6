//! kiln-sched: what the scheduler holds for a node not yet in a buffer (a
//! fused value, `expr`) and how a kernel's worth of them lowers to the
//! structure that codegen renders and the arguments one launch binds
//! (`lower`). Depends on `kiln-ir` only: no GPU API.

pub mod expr;
pub mod lower;

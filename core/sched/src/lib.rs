//! kiln-sched: the scheduler layer. It turns the unrealized part of a graph
//! into a [`schedule::Schedule`] (`walk`): kernel items over buffer slots,
//! as plain data, each beginning and ending where the rules say
//! (`policy`). It holds a node not yet in a buffer as a fused value
//! (`expr`) and lowers a kernel's worth of them to the structure that
//! codegen renders and the arguments one launch binds (`lower`). Depends on
//! `kiln-ir` only: no GPU API.

pub mod attention;
pub mod expr;
pub mod lower;
pub mod pointwise;
mod policy;
pub mod postdom;
pub mod schedule;
pub mod walk;

//! WGSL for fused kernels. Every kernel evaluates one or more [`Body`](kiln_sched::lower::Body)s of
//! SSA ops at a flat index `f` of the kernel's shape: contiguous leaves are
//! read at `offset + f`, strided ones through coordinates unravelled from
//! `f` (so broadcasts, permutes and slices cost index arithmetic, not
//! copies). Four kernels use this: elementwise (one or more outputs),
//! the prologue of a tree reduction, the row kernel (reductions along the
//! last axis and what consumes them) and the matmul epilogue.

mod elementwise;
mod emit;
mod rows;

pub use elementwise::{elementwise_vectorizable, elementwise_wgsl, vectorizable, vectorizable_reading_rows};
pub use emit::{Emitter, Flat, ROWS_PER_INVOCATION, VEC, Walk, reduce_monoid, scalar_param};
pub use rows::{Combine, ROW_LANES_WG, ROW_MAX_LEN, RowLanes, row_lanes_wgsl, row_wgsl};
// For the streamed row kernels (`row_stream`), which share the row walk.
pub(crate) use rows::{
    RowWalk, fold_stage, online_max_and_exp_sum, row_decls, stage_dtype, strided_trips, sums_exp_of_shifted_max,
    trip_prefix,
};

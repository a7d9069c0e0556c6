//! An integer-weight product's launch ([`crate::quant_matmul`]): which shape
//! of the kernel, its meta block and its grid.

use super::{Launch, Variants, grid};
use crate::quant_matmul::{QUANT_COLS, QUANT_WG};
use crate::{Caps, KernelKey, MAX_LOOP, Meta};
use kiln_ir::dtype::DType;
use kiln_ir::error::{KilnError, Result};
use kiln_ir::quant::QuantFormat;
use kiln_sched::lower::Args;

/// Rows of x one invocation (or workgroup) takes when there are several:
/// each unpacked word then serves four rows.
const ROWS_PER: usize = 4;

/// The launch of `out [rows, n] = x [rows, k] @ wᵀ`, `args` binding x (int8
/// codes four to a word with `packed_x`), the codes and the scales (of
/// dtype `scales`); `None` when the output is empty.
pub fn quant_matmul(
    caps: &Caps,
    variants: &Variants,
    op: &'static str,
    (format, packed_x, scales): (QuantFormat, bool, DType),
    (rows, k, n): (usize, usize, usize),
    args: &Args,
) -> Result<Option<Launch>> {
    if rows == 0 || n == 0 {
        return Ok(None);
    }
    let words = k / format.per_word();
    if words > MAX_LOOP {
        return Err(KilnError::Invalid {
            op,
            detail: format!("k = {k} in {format} is {words} words per row, past one kernel loop's {MAX_LOOP}"),
        });
    }
    let cooperative = variants.workgroup_reductions && caps.workgroup_memory;
    let rows_per = if rows == 1 { 1 } else { ROWS_PER };
    let workgroups = if cooperative {
        rows.div_ceil(rows_per) * n
    } else {
        (rows.div_ceil(rows_per) * n.div_ceil(QUANT_COLS as usize)).div_ceil(QUANT_WG as usize)
    };
    let mut meta = Meta::default();
    meta.u(rows).u(words).u(n).u(format.group_len(k) / format.per_word()).u(format.groups(k));
    for l in &args.layouts {
        meta.u(l.offset);
    }
    Ok(Some(Launch {
        key: KernelKey::QuantMatmul { bits: format.bits, rows_per: rows_per as u32, cooperative, packed_x, scales },
        meta,
        groups: grid(caps, op, workgroups)?,
        elements: rows * n,
    }))
}

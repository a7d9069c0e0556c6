//! Matmul operands copied into rgba32float texture arrays laid out as the
//! texture configs of the matmul family read them
//! ([`super::matmul::MatmulConfig::tex`]): A in row blocks, B in column
//! panels, four elements per texel, zeros past the operand's edges (so the
//! matmul kernel clamps nothing and a k step of 4 may pass K).

use kiln_ir::dtype::DType;

/// Where the elements of one operand go: texel (x, y) of layer `l` holds
/// elements (r, c + e), e = 0..4, of the operand (r rows, c columns), with
/// r = l·`rows_per[0]` + x·`rows_per[1]` + y·`rows_per[2]` and c likewise.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OperandTexture {
    pub width: u32,
    pub height: u32,
    pub layers: u32,
    rows_per: [u32; 3],
    cols_per: [u32; 3],
}

impl OperandTexture {
    /// A (`m` × `k`) in blocks of `tile_m` rows, one per layer: texel
    /// (x, y) is row x of the block, k from 4y.
    pub fn a(m: usize, k: usize, tile_m: usize) -> OperandTexture {
        OperandTexture {
            width: tile_m as u32,
            height: k.div_ceil(4) as u32,
            layers: m.div_ceil(tile_m) as u32,
            rows_per: [tile_m as u32, 1, 0],
            cols_per: [0, 0, 4],
        }
    }

    /// B (`k` × `n`) in panels of `tile_n` columns, one per layer: texel
    /// (x, y) is row k = y, columns from 4x of the panel. K rounds up to a
    /// multiple of 4 (the kernel's last k step reads zeros).
    pub fn b(k: usize, n: usize, tile_n: usize) -> OperandTexture {
        OperandTexture {
            width: (tile_n / 4) as u32,
            height: (k.div_ceil(4) * 4) as u32,
            layers: n.div_ceil(tile_n) as u32,
            rows_per: [0, 0, 1],
            cols_per: [tile_n as u32, 4, 0],
        }
    }

    pub fn texels(&self) -> u64 {
        self.width as u64 * self.height as u64 * self.layers as u64
    }

    /// Whether the device allows the texture (and the kernel's u32 texel
    /// index), with a layer to spare for the runtime's GL workaround.
    pub fn fits(&self, caps: &crate::Caps) -> bool {
        let side = caps.max_texture_side;
        self.width <= side && self.height <= side && self.layers < caps.max_texture_layers && self.texels() < 1 << 31
    }

    /// Meta words 8..14 of [`pack_wgsl`]: the row and column coefficients.
    pub fn coefficients(&self) -> [u32; 6] {
        let (r, c) = (self.rows_per, self.cols_per);
        [r[0], r[1], r[2], c[0], c[1], c[2]]
    }
}

/// Invocations per workgroup of the pack kernel.
pub const PACK_WG: u32 = 64;

/// The kernel writing one operand texture: an invocation per texel.
/// Meta: 0 width, 1 height, 2 layers, 3 rows, 4 columns, 5 offset, 6 row
/// stride, 7 column stride (elements), 8..14 [`OperandTexture::coefficients`].
/// With `vec4` (column stride 1; columns, offset and row stride multiples
/// of 4) a texel's four elements are one aligned vec4 of the source (a pair
/// of words of f16 or bf16, unpacked here into the f32 texture).
pub fn pack_wgsl(vec4: bool, dtype: DType) -> String {
    let elem = if vec4 { crate::vec4_storage_type(dtype) } else { crate::storage_type(dtype) };
    let mut s = String::from(super::META_DECL);
    s += &format!("@group(0) @binding(1) var<storage, read> src: array<{elem}>;\n");
    s += "@group(0) @binding(2) var dst: texture_storage_2d_array<rgba32float, write>;\n";
    s += &format!("@compute @workgroup_size({PACK_WG})\n");
    s += "fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) grid: vec3<u32>) {\n";
    s += "    let width = m(0u);\n    let height = m(1u);\n";
    s += &format!("    let t = gid.y * grid.x * {PACK_WG}u + gid.x;\n");
    s += "    if (t >= width * height * m(2u)) {\n        return;\n    }\n";
    s += "    let x = t % width;\n    let y = (t / width) % height;\n    let layer = t / (width * height);\n";
    s += "    let r = layer * m(8u) + x * m(9u) + y * m(10u);\n";
    s += "    let c = layer * m(11u) + x * m(12u) + y * m(13u);\n";
    s += "    let sc = bitcast<i32>(m(7u));\n";
    s += "    let at = i32(m(5u)) + i32(r) * bitcast<i32>(m(6u)) + i32(c) * sc;\n";
    s += "    var v = vec4<f32>(0.0);\n";
    if vec4 {
        let load = crate::load4_expr(dtype, "src", "u32(at) >> 2u");
        s += &format!("    if (r < m(3u) && c < m(4u)) {{\n        v = {load};\n    }}\n");
    } else {
        s += "    if (r < m(3u)) {\n";
        for e in 0..4 {
            let load = crate::load_expr(dtype, "src", &format!("u32(at + {e} * sc)"));
            s += &format!("        if (c + {e}u < m(4u)) {{\n            v[{e}] = {load};\n        }}\n");
        }
        s += "    }\n";
    }
    s + "    textureStore(dst, vec2<u32>(x, y), layer, v);\n}\n"
}

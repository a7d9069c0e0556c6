//! Operand textures of texture matmuls ([`crate::codegen::operand_textures`]):
//! rgba32float 2-D arrays, written by a pack kernel and read by the matmul
//! in the same submit. Like buffers, freed ones wait by size for reuse, so
//! a loop of large products does not allocate one per step.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};

/// Free textures by size, each with its array view (made once).
type Free = Mutex<HashMap<[u32; 3], Vec<(wgpu::Texture, wgpu::TextureView)>>>;

#[derive(Debug)]
pub struct TexturePool {
    device: wgpu::Device,
    free: Arc<Free>,
}

/// A texture on loan from the pool, with the array view kernels bind.
#[derive(Debug)]
pub struct PooledTexture {
    texture: Option<(wgpu::Texture, wgpu::TextureView)>,
    free: Weak<Free>,
}

impl PooledTexture {
    pub fn view(&self) -> &wgpu::TextureView {
        &self.texture.as_ref().expect("present until drop").1
    }
}

impl Drop for PooledTexture {
    fn drop(&mut self) {
        let (Some(texture), Some(free)) = (self.texture.take(), self.free.upgrade()) else {
            return;
        };
        let size = texture.0.size();
        free.lock().unwrap().entry([size.width, size.height, size.depth_or_array_layers]).or_default().push(texture);
    }
}

/// At least `layers`, so that wgpu's GL backend makes the texture a 2-D
/// array: it picks a texture's GL target from its size alone, a 2-D
/// texture for one layer and a cube map (array) for square sides and a
/// multiple of 6 layers, and a 2-D array view of either reads nothing
/// (the texture matmul's one-panel products came out 0 on llvmpipe GL).
fn array_layers(width: u32, height: u32, layers: u32) -> u32 {
    let layers = layers.max(2);
    if width == height && layers.is_multiple_of(6) { layers + 1 } else { layers }
}

impl TexturePool {
    pub fn new(device: wgpu::Device) -> TexturePool {
        TexturePool { device, free: Arc::default() }
    }

    /// A `width` × `height` × `layers` rgba32float array texture that
    /// kernels write as storage and read with `textureLoad`.
    pub fn get(&self, width: u32, height: u32, layers: u32) -> Arc<PooledTexture> {
        let layers = array_layers(width, height, layers);
        let reused = self.free.lock().unwrap().get_mut(&[width, height, layers]).and_then(Vec::pop);
        let texture = reused.unwrap_or_else(|| {
            let texture = self.device.create_texture(&wgpu::TextureDescriptor {
                label: Some("kiln operand"),
                size: wgpu::Extent3d { width, height, depth_or_array_layers: layers },
                mip_level_count: 1,
                sample_count: 1,
                dimension: wgpu::TextureDimension::D2,
                format: wgpu::TextureFormat::Rgba32Float,
                usage: wgpu::TextureUsages::STORAGE_BINDING | wgpu::TextureUsages::TEXTURE_BINDING,
                view_formats: &[],
            });
            let view = texture.create_view(&wgpu::TextureViewDescriptor {
                dimension: Some(wgpu::TextureViewDimension::D2Array),
                ..Default::default()
            });
            (texture, view)
        });
        Arc::new(PooledTexture { texture: Some(texture), free: Arc::downgrade(&self.free) })
    }
}

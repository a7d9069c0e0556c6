//! A mesh: the devices that hold a sharded computation's ranks, and how
//! they exchange values.

use crate::collective::{Collective, InProcess};
use kiln::{Device, KilnError, Result};
use std::ops::Range;
use std::sync::Arc;

/// Devices, one per rank, over a [`Collective`]. A process holds the
/// devices of its own ranks; clones share them.
#[derive(Clone)]
pub struct Mesh {
    inner: Arc<Inner>,
}

struct Inner {
    devices: Vec<Device>,
    collective: Box<dyn Collective>,
}

impl Mesh {
    /// A mesh of this process's devices (for example several adapters),
    /// rank `i` on `devices[i]`.
    pub fn local(devices: Vec<Device>) -> Result<Mesh> {
        let world = devices.len();
        Mesh::over(devices, Box::new(InProcess::new(world)))
    }

    /// A mesh whose ranks this process holds are on `devices`, in the
    /// order of the collective's local ranks.
    pub fn over(devices: Vec<Device>, collective: Box<dyn Collective>) -> Result<Mesh> {
        let ranks = collective.local_ranks();
        if devices.is_empty() || devices.len() != ranks.len() {
            return Err(KilnError::Invalid {
                op: "mesh",
                detail: format!("this process holds ranks {ranks:?} but was given {} devices", devices.len()),
            });
        }
        for (i, d) in devices.iter().enumerate() {
            if devices[..i].contains(d) {
                return Err(KilnError::Invalid {
                    op: "mesh",
                    detail: format!("device {i} ({}) is given twice", d.info().name),
                });
            }
        }
        Ok(Mesh { inner: Arc::new(Inner { devices, collective }) })
    }

    /// Ranks in the whole mesh (all processes).
    pub fn world_size(&self) -> usize {
        self.inner.collective.world_size()
    }

    /// The ranks this process holds.
    pub fn local_ranks(&self) -> Range<usize> {
        self.inner.collective.local_ranks()
    }

    /// This process's devices, one per local rank.
    pub fn devices(&self) -> &[Device] {
        &self.inner.devices
    }

    /// Whether this process holds rank 0 (the one that prints and saves).
    pub fn is_root(&self) -> bool {
        self.local_ranks().start == 0
    }

    /// How the ranks exchange values.
    pub fn collective(&self) -> &dyn Collective {
        self.inner.collective.as_ref()
    }

    /// The element-wise sum over all ranks of equal-length vectors (one per
    /// local rank here), accumulated in f64 in rank order and rounded once:
    /// every process gets the same bits.
    pub fn all_reduce_sum(&self, local: Vec<Vec<f32>>) -> Result<Vec<f32>> {
        crate::collective::all_reduce_sum(self.collective(), local)
    }

    /// Each local rank with its device.
    pub(crate) fn ranks(&self) -> impl Iterator<Item = (usize, &Device)> {
        self.local_ranks().zip(self.devices())
    }
}

impl PartialEq for Mesh {
    fn eq(&self, other: &Mesh) -> bool {
        Arc::ptr_eq(&self.inner, &other.inner)
    }
}

impl std::fmt::Debug for Mesh {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let names: Vec<String> = self.devices().iter().map(|d| d.info().name).collect();
        write!(f, "Mesh(world {}, local ranks {:?} on {names:?})", self.world_size(), self.local_ranks())
    }
}

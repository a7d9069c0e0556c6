//! Parameter trees: nested structures of tensors that flatten to named
//! leaves (paths like `layers.0.weight`) and rebuild from leaves in the
//! same order. Gradients come back in the structure of the parameters.

use kiln_core::{DType, KilnError, Result};
use kiln_ops::Tensor;
use std::collections::BTreeMap;
use std::fmt;

/// Where a leaf sits in a tree: field names, indices and map keys.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Path(Vec<String>);

impl Path {
    /// Append a segment (a field name, an index or a map key).
    pub fn push(&mut self, segment: impl fmt::Display) {
        self.0.push(segment.to_string());
    }
    /// Remove the last segment.
    pub fn pop(&mut self) {
        self.0.pop();
    }
}

impl fmt::Display for Path {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0.is_empty() { f.write_str("<root>") } else { f.write_str(&self.0.join(".")) }
    }
}

/// Leaves being put back into a tree, in flatten order.
pub struct Leaves {
    items: std::vec::IntoIter<Tensor>,
    total: usize,
}

impl Leaves {
    /// `items`, handed out first to last.
    pub fn new(items: Vec<Tensor>) -> Leaves {
        Leaves { total: items.len(), items: items.into_iter() }
    }

    /// The leaf for `path`; an error if they ran out.
    pub fn next(&mut self, path: &Path) -> Result<Tensor> {
        self.items.next().ok_or_else(|| tree_err(format!("ran out of leaves at `{path}` (given {})", self.total)))
    }

    fn finish(self) -> Result<()> {
        match self.items.len() {
            0 => Ok(()),
            left => Err(tree_err(format!("{left} of {} leaves were left over", self.total))),
        }
    }
}

fn tree_err(detail: String) -> KilnError {
    KilnError::Invalid { op: "tree", detail }
}

/// One leaf's place and type: what two trees must share to have the same
/// structure.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeafDef {
    /// Where the leaf sits, e.g. `layers.0.weight` (`<root>` for a lone tensor).
    pub path: String,
    /// The leaf's shape.
    pub shape: Vec<usize>,
    /// The leaf's dtype.
    pub dtype: DType,
}

/// The structure of a tree: its leaves' paths, shapes and dtypes in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Structure(pub Vec<LeafDef>);

impl Structure {
    /// `Ok` if `other` has this structure, else an error for `op` naming
    /// the first difference.
    pub fn expect_same(&self, op: &'static str, what: &str, other: &Structure) -> Result<()> {
        let show = |l: Option<&LeafDef>| match l {
            Some(l) => format!("`{}` ({} {:?})", l.path, l.dtype, l.shape),
            None => "no leaf".into(),
        };
        for i in 0..self.0.len().max(other.0.len()) {
            let (want, got) = (self.0.get(i), other.0.get(i));
            if want != got {
                return Err(KilnError::Invalid {
                    op,
                    detail: format!(
                        "{what}: the tree's structure changed: leaf {i} is {}, expected {} ({} leaves now, {} expected)",
                        show(got),
                        show(want),
                        other.0.len(),
                        self.0.len()
                    ),
                });
            }
        }
        Ok(())
    }
}

/// A nested structure of tensors. Implemented for `Tensor`, `Vec`, arrays,
/// tuples, `Option`, `Box` and `BTreeMap<String, _>`; `#[derive(Tree)]`
/// (crate `kiln-derive`) implements it for structs.
pub trait Tree: Sized {
    /// Call `f` on every leaf with its path, in a fixed order.
    fn visit<'a>(&'a self, path: &mut Path, f: &mut dyn FnMut(&Path, &'a Tensor));

    /// A tree of this one's structure whose leaves are taken from `leaves`
    /// in `visit` order (non-tensor parts are copied from `self`).
    fn rebuild(&self, path: &mut Path, leaves: &mut Leaves) -> Result<Self>;

    /// The leaves with their paths.
    fn named_leaves(&self) -> Vec<(String, Tensor)> {
        let mut out = Vec::new();
        self.visit(&mut Path::default(), &mut |p, t| out.push((p.to_string(), t.clone())));
        out
    }

    /// The leaves without their paths, in `visit` order.
    fn leaves(&self) -> Vec<Tensor> {
        self.named_leaves().into_iter().map(|(_, t)| t).collect()
    }

    /// Every leaf's path, shape and dtype, in `visit` order.
    fn structure(&self) -> Structure {
        let leaf = |(path, t): (String, Tensor)| LeafDef { path, shape: t.shape().to_vec(), dtype: t.dtype() };
        Structure(self.named_leaves().into_iter().map(leaf).collect())
    }

    /// This tree's structure with `leaves` in place of its own.
    fn unflatten(&self, leaves: Vec<Tensor>) -> Result<Self> {
        let mut leaves = Leaves::new(leaves);
        let out = self.rebuild(&mut Path::default(), &mut leaves)?;
        leaves.finish()?;
        Ok(out)
    }

    /// Apply `f(path, leaf)` to every leaf.
    fn map_leaves(&self, mut f: impl FnMut(&str, &Tensor) -> Result<Tensor>) -> Result<Self> {
        let mapped = self.named_leaves().iter().map(|(p, t)| f(p, t)).collect::<Result<Vec<_>>>()?;
        self.unflatten(mapped)
    }
}

impl Tree for Tensor {
    fn visit<'a>(&'a self, path: &mut Path, f: &mut dyn FnMut(&Path, &'a Tensor)) {
        f(path, self)
    }
    fn rebuild(&self, path: &mut Path, leaves: &mut Leaves) -> Result<Self> {
        leaves.next(path)
    }
}

impl Tree for () {
    fn visit<'a>(&'a self, _: &mut Path, _: &mut dyn FnMut(&Path, &'a Tensor)) {}
    fn rebuild(&self, _: &mut Path, _: &mut Leaves) -> Result<Self> {
        Ok(())
    }
}

/// Visit the children of a sequence or map, each under its own segment.
fn visit_children<'a, K: fmt::Display, T: Tree + 'a>(
    children: impl Iterator<Item = (K, &'a T)>,
    path: &mut Path,
    f: &mut dyn FnMut(&Path, &'a Tensor),
) {
    for (k, child) in children {
        path.push(k);
        child.visit(path, f);
        path.pop();
    }
}

fn rebuild_child<T: Tree>(child: &T, segment: impl fmt::Display, path: &mut Path, leaves: &mut Leaves) -> Result<T> {
    path.push(segment);
    let out = child.rebuild(path, leaves);
    path.pop();
    out
}

impl<T: Tree> Tree for Vec<T> {
    fn visit<'a>(&'a self, path: &mut Path, f: &mut dyn FnMut(&Path, &'a Tensor)) {
        visit_children(self.iter().enumerate(), path, f)
    }
    fn rebuild(&self, path: &mut Path, leaves: &mut Leaves) -> Result<Self> {
        self.iter().enumerate().map(|(i, c)| rebuild_child(c, i, path, leaves)).collect()
    }
}

impl<T: Tree, const N: usize> Tree for [T; N] {
    fn visit<'a>(&'a self, path: &mut Path, f: &mut dyn FnMut(&Path, &'a Tensor)) {
        visit_children(self.iter().enumerate(), path, f)
    }
    fn rebuild(&self, path: &mut Path, leaves: &mut Leaves) -> Result<Self> {
        let items =
            self.iter().enumerate().map(|(i, c)| rebuild_child(c, i, path, leaves)).collect::<Result<Vec<T>>>()?;
        match items.try_into() {
            Ok(array) => Ok(array),
            Err(_) => unreachable!("one item per element of the array"),
        }
    }
}

impl<T: Tree> Tree for BTreeMap<String, T> {
    fn visit<'a>(&'a self, path: &mut Path, f: &mut dyn FnMut(&Path, &'a Tensor)) {
        visit_children(self.iter(), path, f)
    }
    fn rebuild(&self, path: &mut Path, leaves: &mut Leaves) -> Result<Self> {
        self.iter().map(|(k, c)| Ok((k.clone(), rebuild_child(c, k, path, leaves)?))).collect()
    }
}

/// `None` has no leaves; `Some(x)` is `x` at the same path.
impl<T: Tree> Tree for Option<T> {
    fn visit<'a>(&'a self, path: &mut Path, f: &mut dyn FnMut(&Path, &'a Tensor)) {
        if let Some(x) = self {
            x.visit(path, f)
        }
    }
    fn rebuild(&self, path: &mut Path, leaves: &mut Leaves) -> Result<Self> {
        self.as_ref().map(|x| x.rebuild(path, leaves)).transpose()
    }
}

impl<T: Tree> Tree for Box<T> {
    fn visit<'a>(&'a self, path: &mut Path, f: &mut dyn FnMut(&Path, &'a Tensor)) {
        (**self).visit(path, f)
    }
    fn rebuild(&self, path: &mut Path, leaves: &mut Leaves) -> Result<Self> {
        (**self).rebuild(path, leaves).map(Box::new)
    }
}

macro_rules! tuple_tree {
    ($($t:ident $i:tt),+) => {
        impl<$($t: Tree),+> Tree for ($($t,)+) {
            fn visit<'a>(&'a self, path: &mut Path, f: &mut dyn FnMut(&Path, &'a Tensor)) {
                $(path.push($i); self.$i.visit(path, f); path.pop();)+
            }
            fn rebuild(&self, path: &mut Path, leaves: &mut Leaves) -> Result<Self> {
                Ok(($(rebuild_child(&self.$i, $i, path, leaves)?,)+))
            }
        }
    };
}
tuple_tree!(A 0);
tuple_tree!(A 0, B 1);
tuple_tree!(A 0, B 1, C 2);
tuple_tree!(A 0, B 1, C 2, D 3);
tuple_tree!(A 0, B 1, C 2, D 3, E 4);
tuple_tree!(A 0, B 1, C 2, D 3, E 4, F 5);

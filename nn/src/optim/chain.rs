//! `chain((a, b, c))`: transformations applied in order, each to the
//! previous one's output; the state is the tuple of their states. A loss
//! scale ([`super::dynamic_loss_scale`]) counts only as the first link.

use super::Transform;
use kiln_autodiff::Tree;
use kiln_core::Result;

/// Transformations applied in order (a tuple of up to six).
#[derive(Debug, Clone, Copy)]
pub struct Chain<T>(pub T);

/// Apply `transforms`, a tuple of up to six, in order.
pub fn chain<T>(transforms: T) -> Chain<T> {
    Chain(transforms)
}

macro_rules! chain_impl {
    ($($t:ident $s:ident $i:tt),+) => {
        impl<P: Tree, $($t: Transform<P>),+> Transform<P> for Chain<($($t,)+)> {
            type State = ($($t::State,)+);
            fn init(&self, params: &P) -> Result<Self::State> {
                Ok(($(self.0.$i.init(params)?,)+))
            }
            fn update(&self, updates: &P, state: &Self::State, params: Option<&P>) -> Result<(P, Self::State)> {
                // `&updates` is `&&P` for the first link (deref-coerced), `&P` after.
                $(let (updates, $s) = self.0.$i.update(&updates, &state.$i, params)?;)+
                Ok((updates, ($($s,)+)))
            }
            // Only the first link sees the loss's gradients as they come.
            fn loss_scale(&self, state: &Self::State) -> Option<kiln_ops::Tensor> {
                self.0.0.loss_scale(&state.0)
            }
        }
    };
}
chain_impl!(A a 0);
chain_impl!(A a 0, B b 1);
chain_impl!(A a 0, B b 1, C c 2);
chain_impl!(A a 0, B b 1, C c 2, D d 3);
chain_impl!(A a 0, B b 1, C c 2, D d 3, E e 4);
chain_impl!(A a 0, B b 1, C c 2, D d 3, E e 4, F f 5);

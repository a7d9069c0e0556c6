//! Reverse-mode autodiff for kiln: vjp rules, `grad`, `value_and_grad`. Not built yet (autodiff issue).

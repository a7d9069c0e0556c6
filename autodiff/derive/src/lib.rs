//! `#[derive(Tree)]`: a struct's tensor fields become leaves named by the
//! field (`encoder.layers.0.weight`). Fields marked `#[tree(skip)]` are
//! not leaves and are cloned when the tree is rebuilt. The generated code
//! names `::kiln`; `#[tree(crate = "path")]` on the struct changes that.

use proc_macro::TokenStream;
use proc_macro2::TokenStream as Tokens;
use quote::{format_ident, quote};
use syn::{Data, DeriveInput, Fields, Index, parse_macro_input, parse_quote, spanned::Spanned};

#[proc_macro_derive(Tree, attributes(tree))]
pub fn derive_tree(input: TokenStream) -> TokenStream {
    let input = parse_macro_input!(input as DeriveInput);
    expand(input).unwrap_or_else(|e| e.to_compile_error()).into()
}

/// The struct-level `crate = "..."` option, or `::kiln`.
fn crate_path(input: &DeriveInput) -> syn::Result<syn::Path> {
    let mut path: syn::Path = parse_quote!(::kiln);
    for attr in input.attrs.iter().filter(|a| a.path().is_ident("tree")) {
        attr.parse_nested_meta(|meta| {
            if meta.path.is_ident("crate") {
                path = meta.value()?.parse::<syn::LitStr>()?.parse()?;
                Ok(())
            } else {
                Err(meta.error("expected `crate = \"path\"`"))
            }
        })?;
    }
    Ok(path)
}

fn is_skipped(field: &syn::Field) -> syn::Result<bool> {
    let mut skip = false;
    for attr in field.attrs.iter().filter(|a| a.path().is_ident("tree")) {
        attr.parse_nested_meta(|meta| {
            if meta.path.is_ident("skip") {
                skip = true;
                Ok(())
            } else {
                Err(meta.error("expected `skip`"))
            }
        })?;
    }
    Ok(skip)
}

fn expand(mut input: DeriveInput) -> syn::Result<Tokens> {
    let krate = crate_path(&input)?;
    let Data::Struct(data) = &input.data else {
        return Err(syn::Error::new(input.span(), "#[derive(Tree)] supports structs only"));
    };
    let (mut visits, mut rebuilds, mut bounds) = (Vec::new(), Vec::new(), Vec::new());
    for (i, field) in data.fields.iter().enumerate() {
        let (member, segment) = match &field.ident {
            Some(id) => (quote!(#id), id.to_string()),
            None => {
                let idx = Index::from(i);
                (quote!(#idx), i.to_string())
            }
        };
        let ty = &field.ty;
        if is_skipped(field)? {
            bounds.push(quote!(#ty: ::core::clone::Clone));
            rebuilds.push(quote!(#member: ::core::clone::Clone::clone(&self.#member)));
            continue;
        }
        bounds.push(quote!(#ty: #krate::Tree));
        visits.push(quote! {
            path.push(#segment);
            #krate::Tree::visit(&self.#member, path, f);
            path.pop();
        });
        let value = format_ident!("field_{}", i);
        rebuilds.push(quote! {
            #member: {
                path.push(#segment);
                let #value = #krate::Tree::rebuild(&self.#member, path, leaves);
                path.pop();
                #value?
            }
        });
    }
    let name = &input.ident;
    let build = match &data.fields {
        Fields::Unit => quote!(Self),
        _ => quote!(Self { #(#rebuilds),* }),
    };
    let where_clause = input.generics.make_where_clause();
    where_clause.predicates.extend(bounds.into_iter().map(|b| -> syn::WherePredicate { parse_quote!(#b) }));
    let (impl_generics, ty_generics, where_clause) = input.generics.split_for_impl();
    Ok(quote! {
        impl #impl_generics #krate::Tree for #name #ty_generics #where_clause {
            fn visit<'kiln_a>(
                &'kiln_a self,
                path: &mut #krate::tree::Path,
                f: &mut dyn FnMut(&#krate::tree::Path, &'kiln_a #krate::Tensor),
            ) {
                let _ = (&path, &f);
                #(#visits)*
            }
            fn rebuild(
                &self,
                path: &mut #krate::tree::Path,
                leaves: &mut #krate::tree::Leaves,
            ) -> #krate::Result<Self> {
                let _ = (&path, &leaves);
                ::core::result::Result::Ok(#build)
            }
        }
    })
}

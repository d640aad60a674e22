//! The control-flow family of the ONNX front end: `If`. A condition known at import (a
//! constant) inlines the branch it selects (its outputs become views named as the If's); a
//! condition computed at run time inlines both
//! branches and selects each output with a `Where` (both are computed, as a GPU would
//! predicate them; the branches must give outputs of broadcast-compatible shapes and one
//! dtype). Branch nodes are imported like the main graph's, reading outer-scope tensors by
//! name. Left out (the node stays opaque with the reason): `Loop` and `Scan`, and branches
//! whose outputs differ in shape or dtype under a run-time condition.

use super::proto::{GraphProto, NodeProto};
use super::{attr, Importer, Lowering};
use crate::error::Result;
use crate::ir::{Node, Op};
use std::borrow::Cow;

impl<'a> Importer<'a> {
    /// Import `g`'s initializers and nodes into the graph being built; the resolved names
    /// of its outputs, or why one has no IR form.
    fn inline(&mut self, g: &'a GraphProto) -> Result<std::result::Result<Vec<String>, String>> {
        for t in &g.initializer {
            self.define_check(&t.name)?;
            self.statics.insert(t.name.clone(), Cow::Borrowed(t));
        }
        for (idx, np) in g.node.iter().enumerate() {
            self.node(idx, np)?;
        }
        let mut outs = vec![];
        for o in &g.output {
            let r = self.resolve(&o.name);
            if let Err(why) = self.runtime(&r, "an If branch's outputs")? {
                return Ok(Err(why));
            }
            outs.push(r);
        }
        Ok(Ok(outs))
    }

    /// Lower `If` node `np` (see the module notes).
    pub(super) fn lower_if(&mut self, np: &'a NodeProto, name: &str) -> Result<Lowering<'a>> {
        let branch = |k: &str| attr(np, k).and_then(|a| a.g.as_deref());
        let (Some(then_g), Some(else_g)) = (branch("then_branch"), branch("else_branch")) else {
            opaque!("then_branch or else_branch is missing")
        };
        let outs: Vec<&str> = np.output.iter().map(String::as_str).collect();
        if then_g.output.len() != outs.len() || else_g.output.len() != outs.len() {
            opaque!(
                "the branches give {} and {} outputs, the node has {}",
                then_g.output.len(),
                else_g.output.len(),
                outs.len()
            );
        }
        let constant = match self.param(np, 0) {
            Some(Ok((v, _))) if v.len() == 1 => Some(v.f64_at(0) != 0.0),
            Some(Ok(_)) => opaque!("the condition must hold one value"),
            _ => None,
        };
        if let Some(c) = constant {
            let chosen = match self.inline(if c { then_g } else { else_g })? {
                Ok(v) => v,
                Err(why) => opaque!("{why}"),
            };
            // Each output a view of the branch's (no copy), so it keeps the If's name, as a
            // graph output must.
            let nodes = outs
                .iter()
                .zip(&chosen)
                .enumerate()
                .filter(|(_, (o, _))| !o.is_empty())
                .map(|(k, (o, r))| Node {
                    name: if k == 0 {
                        name.to_string()
                    } else {
                        format!("{name}#{k}")
                    },
                    op: Op::Reshape {
                        shape: self.specs[r].shape.iter().map(|&d| d as i64).collect(),
                    },
                    inputs: vec![r.clone()],
                    outputs: vec![o.to_string()],
                })
                .collect();
            return Ok(Lowering::Nodes(nodes));
        }
        let Some(cond_raw) = np.input.first().filter(|s| !s.is_empty()) else {
            opaque!("the condition input is missing")
        };
        let cond = self.resolve(cond_raw);
        if let Err(why) = self.runtime(&cond, &format!("node `{name}` (If)"))? {
            opaque!("{why}");
        }
        let t = match self.inline(then_g)? {
            Ok(v) => v,
            Err(why) => opaque!("then_branch: {why}"),
        };
        let e = match self.inline(else_g)? {
            Ok(v) => v,
            Err(why) => opaque!("else_branch: {why}"),
        };
        let nodes = outs
            .iter()
            .zip(t.iter().zip(&e))
            .enumerate()
            .filter(|(_, (o, _))| !o.is_empty())
            .map(|(k, (o, (a, b)))| Node {
                name: if k == 0 {
                    name.to_string()
                } else {
                    format!("{name}#{k}")
                },
                op: Op::Where,
                inputs: vec![cond.clone(), a.clone(), b.clone()],
                outputs: vec![o.to_string()],
            })
            .collect();
        Ok(Lowering::Nodes(nodes))
    }
}

//! The shape family of the ONNX front end: views and data movement (Identity, Constant,
//! Squeeze / Unsqueeze, Reshape, Transpose, Flatten, Slice, Split, Concat, Gather,
//! GatherElements, GatherND,
//! Expand, ConstantOfShape, Tile, Pad, Trilu). Shape arithmetic on constants is folded before
//! these run (`fold`). Left out: Resize, NonZero and run-time shapes.

use super::*;

/// The ONNX ops this family lowers (a node of any other type is not sent here).
pub(super) const OPS: &[&str] = &[
    "Identity",
    "Constant",
    "Squeeze",
    "Unsqueeze",
    "Reshape",
    "Transpose",
    "Slice",
    "Concat",
    "Flatten",
    "Gather",
    "GatherElements",
    "GatherND",
    "Expand",
    "ConstantOfShape",
    "Split",
    "Tile",
    "Pad",
    "Trilu",
];

impl<'a> Importer<'a> {
    /// Lower node `np` (its op type is one of [`OPS`]).
    pub(super) fn lower_shape(
        &mut self,
        np: &'a NodeProto,
        name: &str,
        out: &str,
    ) -> Result<Lowering<'a>> {
        let op_type = np.op_type.as_str();
        let n_in = np.input.iter().filter(|s| !s.is_empty()).count();
        Ok(match op_type {
            "Identity" => {
                arity!(np, 1);
                Lowering::Alias(self.resolve(&np.input[0]))
            }
            "Constant" => {
                let t = if let Some(t) = attr(np, "value").and_then(|a| a.t.as_deref()) {
                    Cow::Borrowed(t)
                } else {
                    let mk = |data_type: i32, dims: Vec<i64>| TensorProto {
                        dims,
                        data_type,
                        name: out.to_string(),
                        ..Default::default()
                    };
                    if let Some(a) = attr(np, "value_float") {
                        Cow::Owned(TensorProto {
                            float_data: vec![a.f],
                            ..mk(dt::FLOAT, vec![])
                        })
                    } else if let Some(a) = attr(np, "value_int") {
                        Cow::Owned(TensorProto {
                            int64_data: vec![a.i],
                            ..mk(dt::INT64, vec![])
                        })
                    } else if let Some(a) = attr(np, "value_floats") {
                        Cow::Owned(TensorProto {
                            float_data: a.floats.clone(),
                            ..mk(dt::FLOAT, vec![a.floats.len() as i64])
                        })
                    } else if let Some(a) = attr(np, "value_ints") {
                        Cow::Owned(TensorProto {
                            int64_data: a.ints.clone(),
                            ..mk(dt::INT64, vec![a.ints.len() as i64])
                        })
                    } else {
                        opaque!("Constant without a value, value_float(s) or value_int(s) attribute (sparse and string constants are not supported)")
                    }
                };
                Lowering::Static(t)
            }
            "Squeeze" | "Unsqueeze" => {
                // Static shapes: a reshape. Axes from the attribute (opset < 13) or the
                // constant second input.
                let axes = match attr_ints(np, "axes") {
                    Some(a) => Some(a.to_vec()),
                    None => match self.param(np, 1) {
                        None => None,
                        Some(Ok((v, _))) => match v.ints() {
                            Ok(a) => Some(a),
                            Err(e) => opaque!("axes {e}"),
                        },
                        Some(Err(why)) => opaque!("the axes must be constant: {why}"),
                    },
                };
                let x = inputs!(self, np, [0]);
                let xs = self.specs[&x[0]].shape.clone();
                let shape: Vec<usize> = if op_type == "Squeeze" {
                    let rank = xs.len() as i64;
                    let drop: Vec<usize> = match axes {
                        None => (0..xs.len()).filter(|i| xs[*i] == 1).collect(),
                        Some(a) => {
                            let mut v = vec![];
                            for ax in a {
                                let k = if ax < 0 { ax + rank } else { ax };
                                if k < 0 || k >= rank || xs[k as usize] != 1 {
                                    opaque!("axis {ax} is not a size-1 axis of {xs:?}");
                                }
                                v.push(k as usize);
                            }
                            v
                        }
                    };
                    xs.iter()
                        .enumerate()
                        .filter(|(i, _)| !drop.contains(i))
                        .map(|(_, d)| *d)
                        .collect()
                } else {
                    let Some(a) = axes else {
                        opaque!("Unsqueeze needs axes")
                    };
                    let rank = (xs.len() + a.len()) as i64;
                    let mut ins: Vec<usize> = vec![];
                    for ax in a {
                        let k = if ax < 0 { ax + rank } else { ax };
                        if k < 0 || k >= rank || ins.contains(&(k as usize)) {
                            opaque!("axis {ax} is out of range or repeated for output rank {rank}");
                        }
                        ins.push(k as usize);
                    }
                    let mut it = xs.iter();
                    (0..rank as usize)
                        .map(|i| {
                            if ins.contains(&i) {
                                1
                            } else {
                                *it.next().unwrap_or(&1)
                            }
                        })
                        .collect()
                };
                one(
                    name,
                    out,
                    Op::Reshape {
                        shape: shape.iter().map(|d| *d as i64).collect(),
                    },
                    x,
                )
            }
            "Reshape" => {
                if n_in == 0 || np.input.len() > 2 {
                    opaque!("expects 1 or 2 inputs");
                }
                let target = match self.param(np, 1) {
                    Some(Ok((v, _))) => match v.ints() {
                        Ok(s) => s,
                        Err(e) => opaque!("target shape {e}"),
                    },
                    Some(Err(why)) => opaque!("the target shape must be constant: {why}"),
                    None => match attr_ints(np, "shape") {
                        Some(s) => s.to_vec(),
                        None => opaque!("no target shape"),
                    },
                };
                if target.len() > MAX_RANK {
                    opaque!("target rank {} exceeds {MAX_RANK}", target.len());
                }
                let x = inputs!(self, np, [0]);
                let xs = &self.specs[&x[0]].shape;
                let allowzero = attr_i(np, "allowzero").unwrap_or(0) != 0;
                let mut shape = Vec::with_capacity(target.len());
                for (i, &d) in target.iter().enumerate() {
                    if d == 0 && !allowzero {
                        match xs.get(i) {
                            Some(&k) => shape.push(k as i64),
                            None => opaque!("target dim {i} is 0 (copy the input dim) but the input has rank {}", xs.len()),
                        }
                    } else {
                        shape.push(d);
                    }
                }
                one(name, out, Op::Reshape { shape }, x)
            }
            "Transpose" => {
                arity!(np, 1);
                let x = inputs!(self, np, [0]);
                let rank = self.specs[&x[0]].shape.len();
                let perm: Vec<usize> = match attr_ints(np, "perm") {
                    Some(p) => match p.iter().map(|&a| usize::try_from(a)).collect() {
                        Ok(p) => p,
                        Err(_) => opaque!("perm {p:?} has a negative axis"),
                    },
                    None => (0..rank).rev().collect(),
                };
                one(name, out, Op::Transpose { perm }, x)
            }
            "Slice" => {
                // Opset ≥ 10: data, starts, ends, [axes], [steps] as constant inputs;
                // before: the same as attributes.
                let ints_at = |me: &Self,
                               i: usize,
                               attr: &str|
                 -> std::result::Result<Option<Vec<i64>>, String> {
                    if let Some(a) = attr_ints(np, attr) {
                        return Ok(Some(a.to_vec()));
                    }
                    match me.param(np, i) {
                        None => Ok(None),
                        Some(Ok((v, _))) => v.ints().map(Some),
                        Some(Err(why)) => Err(why),
                    }
                };
                let starts = match ints_at(self, 1, "starts") {
                    Ok(Some(v)) => v,
                    Ok(None) => opaque!("no starts"),
                    Err(why) => opaque!("starts must be constant: {why}"),
                };
                let ends = match ints_at(self, 2, "ends") {
                    Ok(Some(v)) => v,
                    Ok(None) => opaque!("no ends"),
                    Err(why) => opaque!("ends must be constant: {why}"),
                };
                let axes = match ints_at(self, 3, "axes") {
                    Ok(Some(v)) => v,
                    Ok(None) => (0..starts.len() as i64).collect(),
                    Err(why) => opaque!("axes must be constant: {why}"),
                };
                let steps = match ints_at(self, 4, "steps") {
                    Ok(Some(v)) => v,
                    Ok(None) => vec![1; starts.len()],
                    Err(why) => opaque!("steps must be constant: {why}"),
                };
                one(
                    name,
                    out,
                    Op::Slice {
                        starts,
                        ends,
                        axes,
                        steps,
                    },
                    inputs!(self, np, [0]),
                )
            }
            "Concat" => {
                if n_in == 0 || n_in != np.input.len() {
                    opaque!("expects 1 or more non-empty inputs");
                }
                let Some(axis) = attr_i(np, "axis") else {
                    opaque!("no axis attribute")
                };
                one(name, out, Op::Concat { axis }, inputs!(self, np, 0..n_in))
            }
            "Flatten" => {
                let ins = inputs!(self, np, [0]);
                let shape = self.specs[&ins[0]].shape.clone();
                let axis = attr_i(np, "axis").unwrap_or(1);
                let Some(a) = (if axis < 0 {
                    axis + shape.len() as i64
                } else {
                    axis
                })
                .try_into()
                .ok()
                .filter(|a: &usize| *a <= shape.len()) else {
                    opaque!("axis {axis} is out of range for rank {}", shape.len())
                };
                let outer: usize = shape[..a].iter().product();
                let inner: usize = shape[a..].iter().product();
                one(
                    name,
                    out,
                    Op::Reshape {
                        shape: vec![outer as i64, inner as i64],
                    },
                    ins,
                )
            }
            "Gather" => {
                arity!(np, 2);
                let axis = attr_i(np, "axis").unwrap_or(0);
                one(name, out, Op::Gather { axis }, inputs!(self, np, [0, 1]))
            }
            "GatherElements" => {
                arity!(np, 2);
                let axis = attr_i(np, "axis").unwrap_or(0);
                one(
                    name,
                    out,
                    Op::GatherElements { axis },
                    inputs!(self, np, [0, 1]),
                )
            }
            "Tile" => {
                // Constant repeats r: x [d…] viewed as [1, d0, 1, d1, …], broadcast to
                // [r0, d0, r1, d1, …] and viewed as [r0·d0, r1·d1, …].
                arity!(np, 2);
                let reps = match self.param(np, 1).map(|p| p.and_then(|(v, _)| v.ints())) {
                    Some(Ok(r)) => r,
                    Some(Err(why)) => opaque!("repeats must be constant: {why}"),
                    None => opaque!("no repeats"),
                };
                let x = inputs!(self, np, [0]);
                let xs = self.specs[&x[0]].shape.clone();
                if reps.len() != xs.len() || reps.iter().any(|&r| r < 0) {
                    opaque!("repeats {reps:?} do not match rank {}", xs.len());
                }
                let inter: Vec<i64> = xs.iter().flat_map(|&d| [1, d as i64]).collect();
                let wide: Vec<usize> = xs
                    .iter()
                    .zip(&reps)
                    .flat_map(|(&d, &r)| [r as usize, d])
                    .collect();
                let fin: Vec<i64> = xs.iter().zip(&reps).map(|(&d, &r)| d as i64 * r).collect();
                let (a, b) = (format!("{out}#tile_in"), format!("{out}#tile_wide"));
                Lowering::Nodes(vec![
                    Node {
                        name: format!("{name}#in"),
                        op: Op::Reshape { shape: inter },
                        inputs: vec![x[0].clone()],
                        outputs: vec![a.clone()],
                    },
                    Node {
                        name: format!("{name}#wide"),
                        op: Op::Broadcast { shape: wide },
                        inputs: vec![a],
                        outputs: vec![b.clone()],
                    },
                    Node {
                        name: name.to_string(),
                        op: Op::Reshape { shape: fin },
                        inputs: vec![b],
                        outputs: vec![out.to_string()],
                    },
                ])
            }
            "Trilu" => {
                // At run time: Where(mask, x, 0) with the triangle mask made here (the shapes
                // are static); a constant input was folded above.
                let x = inputs!(self, np, [0]);
                let spec = self.specs[&x[0]].clone();
                let r = spec.shape.len();
                if r < 2 {
                    opaque!("input has rank {r}, Trilu needs 2 or more");
                }
                let k = match self.param(np, 1).map(|p| p.and_then(|(v, _)| v.ints())) {
                    None => 0,
                    Some(Ok(v)) if v.len() == 1 => v[0],
                    Some(Ok(v)) => opaque!("k must be one value, got {v:?}"),
                    Some(Err(why)) => opaque!("k must be constant: {why}"),
                };
                let upper = attr_i(np, "upper").unwrap_or(1) != 0;
                let (n, m) = (spec.shape[r - 2], spec.shape[r - 1]);
                let mask: Vec<i32> = (0..n * m)
                    .map(|f| i32::from(fold::trilu_keeps(upper, k, f / m.max(1), f % m.max(1))))
                    .collect();
                let zero = match spec.dtype {
                    DType::Fp32 => TensorProto {
                        data_type: dt::FLOAT,
                        float_data: vec![0.0],
                        ..Default::default()
                    },
                    DType::Int64 => TensorProto {
                        data_type: dt::INT64,
                        int64_data: vec![0],
                        ..Default::default()
                    },
                    d => opaque!("Trilu of {d} at run time is not lowered (fp32 and int64 are)"),
                };
                let mask_name = match self.add_constant(TensorProto {
                    dims: vec![n as i64, m as i64],
                    data_type: dt::BOOL,
                    int32_data: mask,
                    name: format!("{out}#mask"),
                    ..Default::default()
                })? {
                    Ok(v) => v,
                    Err(why) => opaque!("{why}"),
                };
                let zero_name = match self.add_constant(TensorProto {
                    name: format!("{out}#zero"),
                    ..zero
                })? {
                    Ok(v) => v,
                    Err(why) => opaque!("{why}"),
                };
                one(
                    name,
                    out,
                    Op::Where,
                    vec![mask_name, x[0].clone(), zero_name],
                )
            }
            "Pad" => {
                let mode = match attr_s(np, "mode").as_deref().unwrap_or("constant") {
                    "constant" => crate::ir::PadMode::Constant,
                    "reflect" => crate::ir::PadMode::Reflect,
                    "edge" => crate::ir::PadMode::Edge,
                    "wrap" => crate::ir::PadMode::Wrap,
                    m => opaque!("attribute `mode` = `{m}` is not constant, reflect, edge or wrap"),
                };
                let x = inputs!(self, np, [0]);
                let rank = self.specs[&x[0]].shape.len();
                // Opset < 11: `pads` and `value` are attributes; from 11 they are inputs 1
                // and 2, and from 18 input 3 names the axes the pads apply to.
                let (pads, value) = if self.opset < 11 {
                    let Some(p) = attr_ints(np, "pads") else {
                        opaque!("no `pads` attribute")
                    };
                    (p.to_vec(), attr_f(np, "value").unwrap_or(0.0))
                } else {
                    let pads = match self.param(np, 1).map(|r| r.and_then(|(v, _)| v.ints())) {
                        Some(Ok(p)) => p,
                        Some(Err(why)) => opaque!("the pads must be constant: {why}"),
                        None => opaque!("no pads input"),
                    };
                    let value = match self.param(np, 2) {
                        Some(Ok((v, _))) if v.len() == 1 => v.f64_at(0),
                        Some(Ok(_)) => opaque!("constant_value must be one value"),
                        Some(Err(why)) => opaque!("constant_value must be constant: {why}"),
                        None => 0.0,
                    };
                    (pads, value)
                };
                let pads = match self.param(np, 3) {
                    None => pads,
                    Some(Err(why)) => opaque!("the axes must be constant: {why}"),
                    Some(Ok((v, _))) => {
                        let axes = match v.ints() {
                            Ok(a) => a,
                            Err(e) => opaque!("axes: {e}"),
                        };
                        if pads.len() != 2 * axes.len() {
                            opaque!("{} pads for {} axes", pads.len(), axes.len());
                        }
                        let mut full = vec![0i64; 2 * rank];
                        for (k, &a) in axes.iter().enumerate() {
                            let Some(a) = crate::ir::norm_axis(a, rank) else {
                                opaque!("axis {a} is out of range for rank {rank}")
                            };
                            full[a] = pads[k];
                            full[rank + a] = pads[axes.len() + k];
                        }
                        full
                    }
                };
                one(name, out, Op::Pad { pads, mode, value }, x)
            }
            "GatherND" => {
                // Lowered to a Gather along a flattened leading axis: the index tuples become
                // linear row numbers (constant indices, computed here) or, for 1-tuples read
                // at run time, the indices with their last axis dropped.
                arity!(np, 2);
                let batch_dims = attr_i(np, "batch_dims").unwrap_or(0);
                if batch_dims != 0 {
                    opaque!("batch_dims {batch_dims} (only 0 is lowered)");
                }
                let data = inputs!(self, np, [0]);
                let ds = self.specs[&data[0]].shape.clone();
                let idx_name = self.resolve(&np.input[1]);
                let const_idx = self
                    .statics
                    .get(&idx_name)
                    .map(|t| (t.dims.clone(), tensor_values(t)));
                let (rows_shape, idx_tensor) = match const_idx {
                    Some((dims, vals)) => {
                        let vals = match vals.and_then(Vals::ints) {
                            Ok(v) => v,
                            Err(e) => opaque!("indices: {e}"),
                        };
                        let Some((&k, lead)) = dims.split_last() else {
                            opaque!("indices must have rank >= 1")
                        };
                        let k = k as usize;
                        if k == 0 || k > ds.len() {
                            opaque!("index tuples of length {k} for data of rank {}", ds.len());
                        }
                        let mut lin = Vec::with_capacity(vals.len() / k);
                        for tuple in vals.chunks(k) {
                            let mut at = 0i64;
                            for (j, &i) in tuple.iter().enumerate() {
                                let d = ds[j] as i64;
                                let i = if i < 0 { i + d } else { i };
                                if !(0..d).contains(&i) {
                                    opaque!(
                                        "index {tuple:?} is out of range for data of shape {ds:?}"
                                    );
                                }
                                at = at * d + i;
                            }
                            lin.push(at);
                        }
                        let t = TensorProto {
                            dims: lead.to_vec(),
                            data_type: dt::INT64,
                            int64_data: lin,
                            name: format!("{out}#rows"),
                            ..Default::default()
                        };
                        self.statics.insert(t.name.clone(), Cow::Owned(t.clone()));
                        match self.runtime(&t.name, &format!("node `{name}` (GatherND)"))? {
                            Ok(_) => {}
                            Err(why) => opaque!("{why}"),
                        }
                        (k, t.name)
                    }
                    None => {
                        let idx = inputs!(self, np, [1]);
                        let is = self.specs[&idx[0]].shape.clone();
                        match is.split_last() {
                            Some((1, lead)) => {
                                let rows = format!("{out}#rows");
                                let reshape = Node {
                                    name: format!("{name}#rows"),
                                    op: Op::Reshape {
                                        shape: lead.iter().map(|&d| d as i64).collect(),
                                    },
                                    inputs: vec![idx[0].clone()],
                                    outputs: vec![rows.clone()],
                                };
                                match self.check(std::slice::from_ref(&reshape)) {
                                    Ok(specs) => self.specs.extend(specs),
                                    Err(e) => opaque!("{e}"),
                                }
                                self.nodes.push(reshape);
                                (1, rows)
                            }
                            _ => opaque!(
                                "index tuples longer than 1 read at run time (constant indices are lowered)"
                            ),
                        }
                    }
                };
                let flat: Vec<i64> =
                    std::iter::once(ds[..rows_shape].iter().product::<usize>() as i64)
                        .chain(ds[rows_shape..].iter().map(|&d| d as i64))
                        .collect();
                let flat_name = format!("{out}#flat");
                Lowering::Nodes(vec![
                    Node {
                        name: format!("{name}#flat"),
                        op: Op::Reshape { shape: flat },
                        inputs: vec![data[0].clone()],
                        outputs: vec![flat_name.clone()],
                    },
                    Node {
                        name: name.to_string(),
                        op: Op::Gather { axis: 0 },
                        inputs: vec![flat_name, idx_tensor],
                        outputs: vec![out.to_string()],
                    },
                ])
            }
            "Expand" => {
                arity!(np, 2);
                let target: Vec<usize> = match self.param(np, 1) {
                    Some(Ok((v, _))) => match v.ints() {
                        Ok(s) => match s.iter().map(|&d| usize::try_from(d)).collect() {
                            Ok(s) => s,
                            Err(_) => opaque!("shape {s:?} has a negative dim"),
                        },
                        Err(e) => opaque!("shape {e}"),
                    },
                    Some(Err(why)) => opaque!("the shape must be constant: {why}"),
                    None => opaque!("no shape"),
                };
                let x = inputs!(self, np, [0]);
                let xs = self.specs[&x[0]].shape.clone();
                // ONNX Expand broadcasts both ways: the output is broadcast(x.shape, shape).
                let Some(shape) = crate::ir::broadcast_shapes(&xs, &target) else {
                    opaque!("shape {target:?} does not broadcast with the input's {xs:?}")
                };
                if shape == xs {
                    return Ok(Lowering::Alias(x[0].clone()));
                }
                one(name, out, Op::Broadcast { shape }, x)
            }
            "ConstantOfShape" => {
                // Too large to fold (the folder handles small ones): a broadcast constant.
                let dims = match self.fold_args(np).into_iter().next() {
                    Some(fold::Arg::Const(k)) => match fold::constant_of_shape_dims(&k) {
                        Ok(d) => d,
                        Err(why) => opaque!("{why}"),
                    },
                    _ => opaque!("the shape must be constant"),
                };
                let (value, code) = match fold::constant_of_shape_value(np) {
                    Ok(v) => v,
                    Err(why) => opaque!("{why}"),
                };
                let Some(dtype) = dtype_of(code) else {
                    opaque!(
                        "value of data type {}, which the IR cannot represent",
                        dt::name(code)
                    )
                };
                one(
                    name,
                    out,
                    Op::Constant {
                        shape: dims,
                        dtype,
                        value,
                    },
                    vec![],
                )
            }
            "Split" => {
                if np.input.is_empty() || np.input.len() > 2 {
                    opaque!("expects 1 or 2 inputs");
                }
                let x = inputs!(self, np, [0]);
                let xs = self.specs[&x[0]].shape.clone();
                let axis = attr_i(np, "axis").unwrap_or(0);
                let rank = xs.len() as i64;
                let a = if axis < 0 { axis + rank } else { axis };
                if a < 0 || a >= rank {
                    opaque!("axis {axis} is out of range for rank {rank}");
                }
                let len = xs[a as usize] as i64;
                let k = np.output.len() as i64;
                let sizes: Vec<i64> = if let Some(s) = attr_ints(np, "split") {
                    s.to_vec()
                } else {
                    match self.param(np, 1) {
                        Some(Ok((v, _))) => match v.ints() {
                            Ok(s) => s,
                            Err(e) => opaque!("split {e}"),
                        },
                        Some(Err(why)) => opaque!("the split sizes must be constant: {why}"),
                        None => {
                            // Equal parts; with num_outputs (opset 18) the last may be smaller.
                            let parts = attr_i(np, "num_outputs").unwrap_or(k).max(1);
                            let each = (len + parts - 1) / parts;
                            (0..parts)
                                .map(|i| each.min(len - i * each).max(0))
                                .collect()
                        }
                    }
                };
                if sizes.len() as i64 != k
                    || sizes.iter().any(|&d| d < 0)
                    || sizes.iter().sum::<i64>() != len
                {
                    opaque!("split sizes {sizes:?} do not cover axis {a} of {xs:?} in {k} outputs");
                }
                let mut v = vec![];
                let mut start = 0i64;
                for (i, (o, sz)) in np.output.iter().zip(&sizes).enumerate() {
                    if !o.is_empty() {
                        v.push(Node {
                            name: if i == 0 {
                                name.to_string()
                            } else {
                                format!("{name}#{i}")
                            },
                            op: Op::Slice {
                                starts: vec![start],
                                ends: vec![start + sz],
                                axes: vec![a],
                                steps: vec![1],
                            },
                            inputs: x.clone(),
                            outputs: vec![o.clone()],
                        });
                    }
                    start += sz;
                }
                Lowering::Nodes(v)
            }
            _ => Lowering::Opaque(format!("op `{op_type}` has no IR equivalent")),
        })
    }
}

//! Code generation for fused kernels: each elementwise or row kernel of a [`Program`] is
//! lowered to one loop nest, `for each row r: for each node: (a run of elementwise nodes in
//! one loop over the row's columns | a row operation over the whole row)`, and rendered as
//! C ([`c`]). Values of a run stay in registers; a value read by a later loop or a row op is
//! kept in a per-thread row of scratch; stored values go straight to their output.
//!
//! Left out (the interpreter runs them): matmul kernels, the RMSNorm+SwiGLU pattern, opaque
//! kernels (Concat, Slice, Gather, Conv, pooling), reductions that are not over the last
//! axis, broadcast (`Gather`) inputs of per-row values, and any op without a C form here.
//! [`c::render_program`] says why for each kernel it leaves out.

pub mod c;

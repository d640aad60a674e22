//! Single-precision GEMM, `C = A·B` or `C += A·B`, with register-tiled microkernels written
//! at the machine's vector width: AVX-512F (a tile of 8 rows × 32 columns, 16 accumulators of
//! 16 lanes) and AVX2 + FMA (6 rows × 16 columns, 12 accumulators of 8 lanes), chosen by
//! [`crate::vmath::level`] (so `TENSORFORGE_SIMD` caps it too).
//!
//! The left operand is always **packed**: panels of `mr` rows, each stored k-major
//! (`mr` values of column k, then of column k + 1, …), zero-padded to a whole panel, so the
//! microkernel broadcasts `mr` consecutive values per step. A constant left operand (a
//! convolution's filter) is packed once, at load; a per-run one is packed into a caller's
//! buffer. The right operand is read either packed (panels of `nr` columns, k-major, for a
//! weight packed at load) or in place from a row-major matrix with any row stride (an
//! im2col buffer, an activation): the microkernel loads `nr` consecutive values per step, the
//! last vector of a panel under a lane mask, so a partial panel never reads past its row.
//!
//! Loop order: K in blocks of [`Kernel::kc`], columns in blocks whose `kc`-row slice of B
//! fits [`B_BLOCK_BYTES`] (in L2), M in blocks of [`Kernel::mc`] rows (that block of packed
//! A in L2 too), then row panels of A, each sweeping the column block's panels of B (the
//! panel of A in L1). C is then written as `mr` sequential streams, a row panel at a time:
//! with the column panels outside the row panels (BLIS's order, which keeps a panel of B in
//! L1 instead), a tile column of a 96-row M block wrote 96 streams at once, and
//! EfficientNet's 16 → 96 expansion at 112 × 112 (a 4.8 MB output going to memory) took 297
//! µs in the model against 178 alone; in column blocks (of 256 KiB), 220
//! (docs/performance.md). Every product is a fused multiply-add, so
//! a result equals the sum in the order k = 0, 1, … within a K block, each block's sum then
//! added to C; it can
//! differ from another GEMM's result in the last bits (faer's, a naive loop's). A tile
//! prefetches its packed A panel 2 KiB ahead of its reads: a convolution's filters
//! (1–2 MB in a deep layer) come from beyond L2 once per run, at a rate the hardware
//! prefetcher did not keep up with (MobileNetV2's 320 → 1280 layer 429 → 296 µs in the
//! model; docs/performance.md).
//! An [`Epilogue`] adds a bias per row and an addend (a residual) and clamps, in registers.
//! [`Kernel::gemm_split`] runs a product on rayon's pool in blocks of whole column or row
//! panels, whichever dimension is larger ([`Kernel::blocks`]).
//!
//! A may also be read in place column-major ([`Left::ColMajor`]), the sums may start from a
//! bias per column, and at AVX-512 C may be stored transposed ([`Kernel::gemm_transposed`]:
//! each tile turned in registers), in separate builds of the tile; a packed B panel is
//! prefetched ahead as a packed A is.
//!
//! Left out: other element types, a transposed C at AVX2, a split of K or along both
//! dimensions at once, block sizes read from the CPU's caches (they are
//! fixed for a 32–48 KiB L1 and a 512 KiB–2 MiB L2), and a kernel for CPUs without
//! AVX2 (aarch64 NEON included): there [`Kernel::detect`] returns `None` and callers keep
//! their fallback GEMM.
//!
//! ```
//! use tensorforge_kernels::sgemm::{Kernel, Right};
//! if let Some(kern) = Kernel::detect() {
//!     // [2×3]·[3×2]: row 0 = [1, 2, 3]·[[1, 0], [0, 1], [1, 1]] = [4, 5].
//!     let a = [1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0];
//!     let b = [1.0f32, 0.0, 0.0, 1.0, 1.0, 1.0];
//!     let mut packed = vec![0.0; kern.packed_a_len(2, 3).unwrap()];
//!     kern.pack_a(&a, 2, 3, 3, 1, &mut packed).unwrap();
//!     let mut c = [0.0f32; 4];
//!     kern.gemm(2, 2, 3, &packed, Right::RowMajor { data: &b, ld: 2 }, &mut c, 2, false)
//!         .unwrap();
//!     assert_eq!(c, [4.0, 5.0, 10.0, 11.0]); // row 1: [4, 5, 6] → [4 + 6, 5 + 6]
//! }
//! ```

use crate::clamp::Clamp;
use crate::vmath::Level;
use crate::KernelError;
use rayon::prelude::*;

#[cfg(target_arch = "x86_64")]
use std::arch::x86_64::*;

/// Bytes of one K block's slice of B (`kc × nr` floats, [`Kernel::kc`]): 32 KiB at either
/// width (AVX-512: 256 × 32; AVX2: 512 × 16). Measured on AMD EPYC (Zen 3, AVX2; the
/// `sgemm_vs_faer` example, docs/performance.md): depth 512 against 256 ran the linear
/// shapes 1–10 % faster (197 × 768 × 192: 691 against 762 µs), fewer passes over C and
/// fewer tile calls outweighing a slice that fills the 32 KiB L1 rather than half of it;
/// 256 at AVX-512 was measured on an AVX-512 Xeon and EPYC in earlier sessions.
pub const B_SLICE_BYTES: usize = 32 << 10;

/// Bytes of one column block of B (`kc × ncb` floats) that every row panel of an M block
/// sweeps in turn: a quarter of a 512 KiB L2, beside the A block ([`A_BLOCK_BYTES`]).
/// Two sizes measured (AMD EPYC Zen 5, AVX-512, `run --bench`, five alternated rounds,
/// medians): 128 against 256 KiB, EfficientNet-B0 7628 against 7572 µs, BERT h256 4425
/// against 4461, ConvNeXt 5852 against 6088; 128 leaves room for C in a 512 KiB L2 (Zen 3).
pub const B_BLOCK_BYTES: usize = 128 << 10;

/// Bytes of one block of packed A (`mc × kc` floats) that the microkernel sweeps once per
/// panel of B: half of a 512 KiB L2, so that the block stays there with room for C.
pub const A_BLOCK_BYTES: usize = 256 << 10;

/// A microkernel family for one instruction set: its tile of `mr` rows × `nr` columns.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Kernel {
    level: Level,
    mr: usize,
    nr: usize,
}

/// How the microkernel reads B (`k` rows × `n` columns).
#[derive(Clone, Copy, Debug)]
pub enum Right<'a> {
    /// Packed by [`Kernel::pack_b`]: panels of `nr` columns, k-major.
    Packed(&'a [f32]),
    /// Row-major in place: element (k, j) at `data[k * ld + j]`, `ld ≥ n`.
    RowMajor {
        /// The values.
        data: &'a [f32],
        /// Row stride in elements.
        ld: usize,
    },
    /// Row k at its own offset: element (k, j) at `data[offsets[k] + j]`. A convolution's
    /// implicit GEMM reads its input planes this way, row (channel, tap) at the tap's
    /// offset in the zero-padded planes, with no column matrix.
    Offsets {
        /// The values.
        data: &'a [f32],
        /// One offset per row of B (`k` of them).
        offsets: &'a [usize],
    },
    /// Rows at their own offsets, and each row's columns in runs of `run` consecutive values
    /// at their own offsets: element (k, j) at `data[offsets[k] + run_offsets[j / run] +
    /// j % run]`. `run` must be a multiple of [`Kernel::lanes`], so that every vector the
    /// kernel loads lies inside one run. A convolution whose output width is such a multiple
    /// reads each output row's window of the input planes this way, with no wasted columns.
    Runs {
        /// The values.
        data: &'a [f32],
        /// One offset per row of B (`k` of them).
        offsets: &'a [usize],
        /// Columns per run.
        run: usize,
        /// One offset per run (`⌈n / run⌉` of them).
        run_offsets: &'a [usize],
    },
}

/// How the microkernel reads A (`m × k`).
#[derive(Clone, Copy, Debug)]
pub enum Left<'a> {
    /// Packed by [`Kernel::pack_a`] (a slice starting at a panel boundary is a block of rows).
    Packed(&'a [f32]),
    /// Row-major in place: element (i, p) at `data[i * ld + p]`, `ld ≥ k`. The microkernel
    /// broadcasts from `mr` rows at once, so nothing is packed: an activation read once per
    /// product (a linear layer's) costs no extra pass. A partial last panel re-reads its last
    /// row for the missing ones (their results are not stored), never past `m` rows.
    RowMajor {
        /// The values.
        data: &'a [f32],
        /// Row stride in elements.
        ld: usize,
    },
    /// Column-major in place: element (i, p) at `data[p * ld + i]`, `ld ≥ m`. Each step's
    /// `mr` values are consecutive, as in a packed panel, but `ld` apart from one step to
    /// the next: a convolution's input planes (`C × H·W`) read as the left operand `H·W × C`
    /// of a product whose columns are output channels, with nothing packed. A partial last
    /// panel re-reads its last row, as [`Left::RowMajor`] does.
    ColMajor {
        /// The values.
        data: &'a [f32],
        /// Column stride in elements.
        ld: usize,
    },
}

/// What the microkernel does to C beyond the product, while each tile is in registers: the
/// sums of row `i` start from `row_bias[i]` (a convolution's bias per output channel; C is
/// then `bias + A·B`, or `C + bias + A·B` when accumulating), or those of column `j` from
/// `col_bias[j]`, after the last K block an
/// `addend` laid out as C is added (a residual connection), and every stored value is
/// clamped ([`Clamp`]: ReLU, ReLU6): `C = clamp((C +) (bias + A·B) + addend)`, each `+` one
/// f32 rounding, in that order. A bias filled into C first, a residual added and a clamp
/// applied after the product are each one more pass over C, from memory when C is larger
/// than the caches.
#[derive(Clone, Copy, Debug)]
pub struct Epilogue<'a> {
    /// One value per row of C (`m` of them), or none.
    pub row_bias: Option<&'a [f32]>,
    /// One value per column of C (`n` of them), or none (not with a row bias): a
    /// convolution's bias when C's columns are its output channels.
    pub col_bias: Option<&'a [f32]>,
    /// Values laid out as C (element (i, j) at `addend[i · ldc + j]`, or `[j · ldct + i]` for
    /// [`Kernel::gemm_transposed`]), or none.
    pub addend: Option<&'a [f32]>,
    /// Bounds applied to every stored value ([`Clamp::NONE`]: none).
    pub clamp: Clamp,
}

impl Epilogue<'_> {
    /// No bias, no addend, no clamp: C is the product (or C plus it).
    pub const NONE: Epilogue<'static> = Epilogue {
        row_bias: None,
        col_bias: None,
        addend: None,
        clamp: Clamp::NONE,
    };
}

fn invalid(msg: String) -> KernelError {
    KernelError::InvalidArgument(msg)
}

fn ceil_to(x: usize, m: usize) -> Option<usize> {
    x.div_ceil(m).checked_mul(m)
}

/// Largest offset + 1 of a strided `rows × cols` matrix (0 when empty).
fn span(rows: usize, cols: usize, rs: usize, cs: usize) -> Option<usize> {
    if rows == 0 || cols == 0 {
        return Some(0);
    }
    (rows - 1)
        .checked_mul(rs)?
        .checked_add((cols - 1).checked_mul(cs)?)?
        .checked_add(1)
}

impl Kernel {
    /// The kernel for the current [`crate::vmath::level`], or `None` where there is none
    /// (no AVX2, or not x86-64).
    pub fn detect() -> Option<Kernel> {
        Kernel::for_level(crate::vmath::level())
    }

    /// The kernel for `level`, if this build has one and the CPU supports it.
    pub fn for_level(level: Level) -> Option<Kernel> {
        if !level.is_supported() {
            return None;
        }
        match level {
            Level::Avx512 if cfg!(target_arch = "x86_64") => Some(Kernel {
                level,
                mr: 8,
                nr: 32,
            }),
            Level::Avx2 if cfg!(target_arch = "x86_64") => Some(Kernel {
                level,
                mr: 6,
                nr: 16,
            }),
            _ => None,
        }
    }

    /// The instruction set.
    pub fn level(&self) -> Level {
        self.level
    }

    /// Rows of one panel of packed A: a caller that splits the rows of C between threads
    /// splits at multiples of this.
    pub fn panel_rows(&self) -> usize {
        self.mr
    }

    /// Columns of one panel of packed B.
    pub fn panel_cols(&self) -> usize {
        self.nr
    }

    /// Depth of one K block: `kc × nr` floats of B make [`B_SLICE_BYTES`].
    pub fn kc(&self) -> usize {
        B_SLICE_BYTES / (4 * self.nr)
    }

    /// Rows of one M block: a whole number of panels of A whose `mc × kc` floats fit
    /// [`A_BLOCK_BYTES`] (at least one panel).
    pub fn mc(&self) -> usize {
        self.mc_for(self.kc())
    }

    /// [`Kernel::mc`] for a K block of `kc` steps: a shallower block (a product with
    /// k < [`Kernel::kc`]) holds more rows in the same bytes, `⌊A_BLOCK_BYTES / (4·kc·mr)⌋`
    /// panels. At k = 256 the AVX2 block is 252 rows, not 126, so M = 128 runs as one block
    /// and B's panels pass once rather than twice.
    pub fn mc_for(&self, kc: usize) -> usize {
        (A_BLOCK_BYTES / (4 * kc.max(1) * self.mr)).max(1) * self.mr
    }

    /// Rows of the next tile when `left` rows of the M block remain: a whole panel (`mr`)
    /// while at least that many are left, else what is left, except that an AVX2 A read in
    /// place ends 7 or 8 rows as a 4-row tile and a 3- or 4-row one. The reason is FMA
    /// latency: AVX2's 2-row tile has 4 accumulators, and 4 chains of 4-cycle fused
    /// multiply-adds fill half of Zen 3's two FMA pipes, so its 2 rows cost as much as 4;
    /// the 4-row tile's 8 chains fill both (measured on AMD EPYC, Zen 3, AVX2: 128 × 256 ·
    /// 256 × 768 as 21 tiles of 6 rows and one of 2 took 2.3–4.2 % longer than 126 rows, for
    /// 1.6 % more rows; as 20 of 6 and 2 of 4 it runs at the 6-row rate: the `sgemm_rows` example,
    /// docs/performance.md, "The last rows of an M block"). A packed A keeps whole panels (its layout is in panels of `mr`).
    pub fn tile_rows(&self, left: usize, in_place: bool) -> usize {
        if in_place && self.level == Level::Avx2 && (left == self.mr + 1 || left == self.mr + 2) {
            4
        } else {
            self.mr.min(left)
        }
    }

    /// f32 lanes of one vector (16 for AVX-512, 8 for AVX2): a [`Right::Runs`] run is a
    /// multiple of this.
    pub fn lanes(&self) -> usize {
        match self.level {
            Level::Avx512 => 16,
            _ => 8,
        }
    }

    /// Floats of A (`m × k`) packed: `⌈m / mr⌉ · mr · k`; `None` on overflow.
    pub fn packed_a_len(&self, m: usize, k: usize) -> Option<usize> {
        ceil_to(m, self.mr)?.checked_mul(k)
    }

    /// Floats of B (`k × n`) packed: `⌈n / nr⌉ · nr · k`; `None` on overflow.
    pub fn packed_b_len(&self, k: usize, n: usize) -> Option<usize> {
        ceil_to(n, self.nr)?.checked_mul(k)
    }

    /// Offset in packed A (`k` columns) of the panel that starts at row `row` (a multiple of
    /// [`Kernel::panel_rows`]).
    pub fn a_panel_offset(&self, row: usize, k: usize) -> usize {
        (row / self.mr) * self.mr * k
    }

    /// Packs A (`m × k`, element (i, p) at `a[i * rs + p * cs]`) into `out`
    /// ([`Kernel::packed_a_len`] floats), zero-padding the last panel.
    pub fn pack_a(
        &self,
        a: &[f32],
        m: usize,
        k: usize,
        rs: usize,
        cs: usize,
        out: &mut [f32],
    ) -> Result<(), KernelError> {
        pack_panels("A", a, m, k, rs, cs, self.mr, out)
    }

    /// Packs B (`k × n`, element (p, j) at `b[p * rs + j * cs]`) into `out`
    /// ([`Kernel::packed_b_len`] floats), zero-padding the last panel: B's columns are
    /// packed as A's rows are, so this packs Bᵀ (`n × k`, strides swapped).
    pub fn pack_b(
        &self,
        b: &[f32],
        k: usize,
        n: usize,
        rs: usize,
        cs: usize,
        out: &mut [f32],
    ) -> Result<(), KernelError> {
        pack_panels("B", b, n, k, cs, rs, self.nr, out)
    }

    /// `C = A·B` (or `C += A·B` with `accumulate`) for A `m × k` packed by
    /// [`Kernel::pack_a`] (a slice starting at a panel boundary is a block of rows), B
    /// `k × n` as [`Right`] says, and C `m × n` row-major with row stride `ldc ≥ n`.
    /// Every slice is checked against the shapes first; a wrong length is an error, never an
    /// out-of-bounds access.
    #[allow(clippy::too_many_arguments)]
    pub fn gemm(
        &self,
        m: usize,
        n: usize,
        k: usize,
        a_packed: &[f32],
        b: Right,
        c: &mut [f32],
        ldc: usize,
        accumulate: bool,
    ) -> Result<(), KernelError> {
        self.gemm_left(m, n, k, Left::Packed(a_packed), b, c, ldc, accumulate)
    }

    /// [`Kernel::gemm`] with A as [`Left`] says: packed, or row-major in place.
    #[allow(clippy::too_many_arguments)]
    pub fn gemm_left(
        &self,
        m: usize,
        n: usize,
        k: usize,
        a: Left,
        b: Right,
        c: &mut [f32],
        ldc: usize,
        accumulate: bool,
    ) -> Result<(), KernelError> {
        self.gemm_with(m, n, k, a, b, c, ldc, accumulate, Epilogue::NONE)
    }

    /// [`Kernel::gemm_left`] with an [`Epilogue`]: `C = clamp(bias + A·B + addend)` (or
    /// `clamp(C + bias + A·B + addend)` when accumulating), bias, addend and clamp applied in
    /// the tile's registers. A row's sum starts from its bias, so its result can differ in
    /// the last bit from `bias + (A·B)` computed apart; the addend and the clamp are exactly
    /// the separate ops'.
    #[allow(clippy::too_many_arguments)]
    pub fn gemm_with(
        &self,
        m: usize,
        n: usize,
        k: usize,
        a: Left,
        b: Right,
        c: &mut [f32],
        ldc: usize,
        accumulate: bool,
        ep: Epilogue,
    ) -> Result<(), KernelError> {
        self.gemm_split(m, n, k, a, b, c, ldc, accumulate, ep, 1)
    }

    /// [`Kernel::gemm_with`] cut into up to `workers` blocks of C ([`Kernel::blocks`]: whole
    /// panels of columns or rows) run on rayon's pool. Each block's sums are the one-block
    /// product's (the same K blocks, in the same order), so the result does not depend on
    /// `workers`.
    #[allow(clippy::too_many_arguments)]
    pub fn gemm_split(
        &self,
        m: usize,
        n: usize,
        k: usize,
        a: Left,
        b: Right,
        c: &mut [f32],
        ldc: usize,
        accumulate: bool,
        ep: Epilogue,
        workers: usize,
    ) -> Result<(), KernelError> {
        self.split(
            m,
            n,
            k,
            a,
            b,
            c,
            CLayout::RowMajor(ldc),
            accumulate,
            ep,
            workers,
        )
    }

    /// [`Kernel::gemm_split`] into C transposed: element (i, j) at `c[j·ldct + i]`,
    /// `ldct ≥ m`. A convolution's product taken as pixels × output channels (its input
    /// planes read column-major, [`Left::ColMajor`]; its filters transposed as B) then
    /// writes its output planes: each tile's 8 rows × 16 columns are transposed in
    /// registers and stored as 16 runs of 8 pixels. On a 7 × 7 map (49 pixels) that uses
    /// 49 of 56 lanes against 49 of 64 as channels × pixels. AVX-512 only (the kernel's 8
    /// rows). An addend is laid out as C, transposed too (a residual's planes).
    #[allow(clippy::too_many_arguments)]
    pub fn gemm_transposed(
        &self,
        m: usize,
        n: usize,
        k: usize,
        a: Left,
        b: Right,
        c: &mut [f32],
        ldct: usize,
        accumulate: bool,
        ep: Epilogue,
        workers: usize,
    ) -> Result<(), KernelError> {
        self.split(
            m,
            n,
            k,
            a,
            b,
            c,
            CLayout::Transposed(ldct),
            accumulate,
            ep,
            workers,
        )
    }

    #[allow(clippy::too_many_arguments)]
    fn split(
        &self,
        m: usize,
        n: usize,
        k: usize,
        a: Left,
        b: Right,
        c: &mut [f32],
        layout: CLayout,
        accumulate: bool,
        ep: Epilogue,
        workers: usize,
    ) -> Result<(), KernelError> {
        let bad = |what: &str| invalid(format!("sgemm: {what} for a {m}×{k}·{k}×{n} product"));
        if m == 0 || n == 0 {
            return Ok(());
        }
        if ep.row_bias.is_some_and(|b| b.len() < m) {
            return Err(bad("the row bias has fewer than m values"));
        }
        if ep.col_bias.is_some_and(|b| b.len() < n) {
            return Err(bad("the column bias has fewer than n values"));
        }
        if ep.row_bias.is_some() && ep.col_bias.is_some() {
            return Err(bad("a row bias and a column bias together"));
        }
        match a {
            Left::Packed(a_packed) => {
                let a_need = self
                    .packed_a_len(m, k)
                    .ok_or_else(|| bad("packed A overflows"))?;
                if a_packed.len() < a_need {
                    return Err(bad("packed A is too short"));
                }
            }
            Left::RowMajor { data, ld } => {
                let need = span(m, k, ld, 1).ok_or_else(|| bad("A overflows"))?;
                if ld < k || data.len() < need {
                    return Err(bad("A is too short or its stride below k"));
                }
            }
            Left::ColMajor { data, ld } => {
                let need = span(m, k, 1, ld).ok_or_else(|| bad("A overflows"))?;
                if ld < m || data.len() < need {
                    return Err(bad("A is too short or its stride below m"));
                }
            }
        }
        // C's stride, and whether it is stored transposed.
        let (ldc, transposed, c_need) = match layout {
            CLayout::RowMajor(ldc) => {
                if ldc < n {
                    return Err(bad("C's stride is below n"));
                }
                (
                    ldc,
                    false,
                    span(m, n, ldc, 1).ok_or_else(|| bad("C overflows"))?,
                )
            }
            CLayout::Transposed(ldct) => {
                if self.level != Level::Avx512 {
                    return Err(bad("a transposed C without AVX-512"));
                }
                if ldct < m {
                    return Err(bad("C's stride is below m"));
                }
                (
                    ldct,
                    true,
                    span(n, m, ldct, 1).ok_or_else(|| bad("C overflows"))?,
                )
            }
        };
        if c.len() < c_need {
            return Err(bad("C is too short"));
        }
        if ep.addend.is_some_and(|d| d.len() < c_need) {
            return Err(bad("the addend is shorter than C"));
        }
        let mut offs: *const usize = std::ptr::null();
        let mut runs: Option<(usize, &[usize])> = None;
        let (b_ptr, b_panel_stride, ldb) = match b {
            Right::Packed(d) => {
                let need = self
                    .packed_b_len(k, n)
                    .ok_or_else(|| bad("packed B overflows"))?;
                if d.len() < need {
                    return Err(bad("packed B is too short"));
                }
                (d.as_ptr(), self.nr * k, self.nr)
            }
            Right::RowMajor { data, ld } => {
                let need = span(k, n, ld, 1).ok_or_else(|| bad("B overflows"))?;
                if ld < n || data.len() < need {
                    return Err(bad("B is too short or its stride below n"));
                }
                (data.as_ptr(), self.nr, ld)
            }
            Right::Offsets { data, offsets } => {
                let rows_fit = offsets.len() >= k
                    && offsets[..k]
                        .iter()
                        .all(|&o| o.checked_add(n).is_some_and(|e| e <= data.len()));
                if !rows_fit {
                    return Err(bad("B's row offsets reach past its values"));
                }
                offs = offsets.as_ptr();
                (data.as_ptr(), self.nr, 0)
            }
            Right::Runs {
                data,
                offsets,
                run,
                run_offsets,
            } => {
                if run == 0 || run % self.lanes() != 0 {
                    return Err(bad(&format!(
                        "a run of {run} columns is not a multiple of {} lanes",
                        self.lanes()
                    )));
                }
                let nruns = n.div_ceil(run);
                if offsets.len() < k || run_offsets.len() < nruns {
                    return Err(bad("B has too few row or run offsets"));
                }
                // Every element lies below max(row offset) + run offset + run length.
                let top = offsets[..k].iter().copied().max().unwrap_or(0);
                let fits = run_offsets[..nruns].iter().enumerate().all(|(ri, &ro)| {
                    let len = run.min(n - ri * run);
                    top.checked_add(ro)
                        .and_then(|e| e.checked_add(len))
                        .is_some_and(|e| e <= data.len())
                });
                if !fits {
                    return Err(bad("B's row and run offsets reach past its values"));
                }
                offs = offsets.as_ptr();
                runs = Some((run, &run_offsets[..nruns]));
                (data.as_ptr(), self.nr, 0)
            }
        };
        if k == 0 {
            for i in 0..m {
                for j in 0..n {
                    let at = if transposed { j * ldc + i } else { i * ldc + j };
                    let b = ep.row_bias.map_or(0.0, |b| b[i]) + ep.col_bias.map_or(0.0, |b| b[j]);
                    let y = if accumulate { c[at] + b } else { b };
                    let y = ep.addend.map_or(y, |d| y + d[at]);
                    c[at] = ep.clamp.apply(y);
                }
            }
            return Ok(());
        }
        let job = Job {
            n,
            k,
            a,
            b_ptr,
            b_panel_stride,
            ldb,
            offs,
            runs,
            packed_b: matches!(b, Right::Packed(_)),
            c: c.as_mut_ptr(),
            ldc,
            transposed,
            accumulate,
            ep,
        };
        // One worker: no plan (`blocks` allocates one).
        let blocks = if workers > 1 {
            self.blocks(m, n, workers)
        } else {
            Vec::new()
        };
        if blocks.len() <= 1 {
            // SAFETY: the checks above bound every access of the job's whole range.
            unsafe { self.run_block(&job, 0..m, 0..n) };
            return Ok(());
        }
        // SAFETY: as above for each block's range, a part of the whole; the blocks write
        // disjoint parts of C (rows or columns), and read the rest only.
        blocks
            .par_iter()
            .for_each(|(rows, cols)| unsafe { self.run_block(&job, rows.clone(), cols.clone()) });
        Ok(())
    }

    /// How [`Kernel::gemm_split`] cuts an `m × n` product for `workers`: into at most
    /// `workers` blocks of whole column panels (`nr`) or of whole row panels (`mr`),
    /// whichever leaves the largest block the fewest tiles (the slowest worker's share: 96
    /// rows × 196 columns on two workers is 48 rows × 7 panels = 42 tiles a block cut by
    /// rows, but 128 + 68 columns, 4 panels × 12 = 48 tiles in the larger block, cut by
    /// columns). On a tie the cut goes across the larger dimension: a row block reads all of
    /// B and a column
    /// block all of A, so the operand read twice is then the smaller (a convolution of 16
    /// output channels over a 112 × 112 map reads its 16 × 32 filters twice, not its
    /// 32 × 12544 input).
    pub fn blocks(
        &self,
        m: usize,
        n: usize,
        workers: usize,
    ) -> Vec<(std::ops::Range<usize>, std::ops::Range<usize>)> {
        let cut = |len: usize, unit: usize| -> Vec<std::ops::Range<usize>> {
            let per = len
                .div_ceil(workers.max(1))
                .next_multiple_of(unit)
                .max(unit);
            (0..len)
                .step_by(per)
                .map(|s| s..(s + per).min(len))
                .collect()
        };
        if workers <= 1 || m == 0 || n == 0 {
            return vec![(0..m, 0..n)];
        }
        let (rows, cols) = (cut(m, self.mr), cut(n, self.nr));
        // Tiles of the largest block: its panels of rows times its panels of columns.
        let row_tiles = rows[0].len().div_ceil(self.mr) * n.div_ceil(self.nr);
        let col_tiles = m.div_ceil(self.mr) * cols[0].len().div_ceil(self.nr);
        if col_tiles < row_tiles || (col_tiles == row_tiles && n >= m) {
            cols.into_iter().map(|c| (0..m, c)).collect()
        } else {
            rows.into_iter().map(|r| (r, 0..n)).collect()
        }
    }

    /// Rows `row_range` and columns `col_range` of the job's C (`row_range.start` a multiple
    /// of `mr`, `col_range.start` of `nr`): the module's loop order over that block.
    ///
    /// # Safety
    /// The job's operands were checked for its whole `m × n` range (`gemm_split`); no other
    /// thread writes this block of C meanwhile; the CPU supports `self.level`.
    unsafe fn run_block(
        &self,
        job: &Job,
        row_range: std::ops::Range<usize>,
        col_range: std::ops::Range<usize>,
    ) {
        let Job {
            n,
            k,
            a,
            b_ptr,
            b_panel_stride,
            ldb,
            offs,
            runs,
            packed_b,
            c: c_ptr,
            ldc,
            transposed,
            accumulate,
            ep,
        } = *job;
        let (mr, nr) = (self.mr, self.nr);
        let kcmax = self.kc();
        let in_place = !matches!(a, Left::Packed(_));
        let mut pc = 0;
        while pc < k {
            let kc = kcmax.min(k - pc);
            let mc = self.mc_for(kc);
            let acc = accumulate || pc > 0;
            // The bias starts the first K block's sums; the addend and the clamp end the
            // last one's.
            let first = pc == 0;
            let last = pc + kc == k;
            let clamp = (last && !ep.clamp.is_none()).then_some(ep.clamp);
            // Columns in blocks of `ncb` (a multiple of nr) whose kc × ncb slice of B fits
            // B_BLOCK_BYTES (in L2); within a block, each row panel sweeps the block's
            // columns, so that C is written as `mr` sequential streams, not as one stream per
            // row of the M block.
            let ncb = (B_BLOCK_BYTES / (4 * kc)).max(nr) / nr * nr;
            let mut jc = col_range.start;
            while jc < col_range.end {
                let jend = (jc + ncb).min(col_range.end);
                let mut ib = row_range.start;
                while ib < row_range.end {
                    let mend = (ib + mc).min(row_range.end);
                    let mut i0 = ib;
                    while i0 < mend {
                        let rows = self.tile_rows(mend - i0, in_place);
                        // Packed: panel i0/mr from (i0/mr)·mr·k, the block pc·mr into it (a_ld
                        // 0); row-major: row i0 at i0·ld, column pc (rows i0..i0 + rows,
                        // columns pc..pc + kc inside `span(m, k, ld, 1)`).
                        // Column-major: row i0 at i0, column pc at pc·ld.
                        let (ap, asrc) = match a {
                            Left::Packed(d) => (
                                d.as_ptr().add(i0 * k + pc * mr),
                                ASrc {
                                    rs: 1,
                                    step: mr,
                                    packed: true,
                                },
                            ),
                            Left::RowMajor { data, ld } => (
                                data.as_ptr().add(i0 * ld + pc),
                                ASrc {
                                    rs: ld,
                                    step: 1,
                                    packed: false,
                                },
                            ),
                            Left::ColMajor { data, ld } => (
                                data.as_ptr().add(pc * ld + i0),
                                ASrc {
                                    rs: 1,
                                    step: ld,
                                    packed: false,
                                },
                            ),
                        };
                        // Rows i0..i0 + rows of the bias (checked: m values).
                        let bias = match ep.row_bias {
                            Some(b) if first => b.as_ptr().add(i0),
                            _ => std::ptr::null(),
                        };
                        let mut j0 = jc;
                        while j0 < jend {
                            let cols = nr.min(jend - j0);
                            // Element (i0, j0) of C and of the addend.
                            let cpos = if transposed {
                                j0 * ldc + i0
                            } else {
                                i0 * ldc + j0
                            };
                            let cbias = match ep.col_bias {
                                Some(b) if first => b.as_ptr().add(j0),
                                _ => std::ptr::null(),
                            };
                            // SAFETY (all pointer arithmetic below): the checks above bound
                            // every panel: packed B panel j0/nr spans nr·k floats from
                            // (j0/nr)·nr·k, the block starts pc·nr into it; row-major B row
                            // pc + t, columns j0..j0 + cols lie inside `span(k, n, ld, 1)`;
                            // packed A panel i0/mr spans mr·k floats; C rows i0..i0 + rows,
                            // columns j0..j0 + cols lie inside `span(m, n, ldc, 1)`. Offsets
                            // rows: row pc + t at b_ptr + offsets[pc + t] + j0, each checked
                            // to hold n values. Runs: vector v of the tile starts at column
                            // j0 + lanes·v, inside run (j0 + lanes·v) / run (runs are whole
                            // vectors), at that run's offset.
                            let w = self.lanes();
                            let mut vec_off = [0, w];
                            if let Some((run, ro)) = runs {
                                for (v, o) in vec_off.iter_mut().enumerate() {
                                    let j = (j0 + w * v).min(n - 1);
                                    *o = ro[j / run] + j % run;
                                }
                            }
                            let (bp, op) = if runs.is_some() {
                                (b_ptr, offs.add(pc))
                            } else if packed_b {
                                (b_ptr.add((j0 / nr) * b_panel_stride + pc * nr), offs)
                            } else if offs.is_null() {
                                (b_ptr.add(pc * ldb + j0), offs)
                            } else {
                                (b_ptr.add(j0), offs.add(pc))
                            };
                            let brows = Rows {
                                ptr: bp,
                                ld: ldb,
                                offs: op,
                                vec_off,
                                packed: packed_b,
                            };
                            // The addend's element (i0, j0), laid out as C (checked).
                            let add = match ep.addend {
                                Some(d) if last => d.as_ptr().add(cpos),
                                _ => std::ptr::null(),
                            };
                            let out = Store {
                                c: c_ptr.add(cpos),
                                ldc,
                                transposed,
                                rows,
                                acc,
                                bias,
                                cbias,
                                add,
                                clamp,
                            };
                            self.tile(kc, ap, asrc, brows, cols, out);
                            j0 += nr;
                        }
                        i0 += rows;
                    }
                    ib = mend;
                }
                jc = jend;
            }
            pc += kc;
        }
    }

    /// One tile: `rows ≤ mr` rows and `cols ≤ nr` columns of C from `kc` steps.
    ///
    /// # Safety
    /// Rows `0..rows` of `a` (`asrc`: at `r·rs`, each step `step` further) have `kc`
    /// readable floats each (a packed panel: `kc · mr`); B rows `0..kc` (see [`Rows`]) have
    /// `cols` readable floats each; C rows `0..rows` (stride `ldc`) have `cols` writable
    /// floats each, and a non-null bias `rows` readable values; the CPU supports
    /// `self.level`.
    #[inline]
    unsafe fn tile(&self, kc: usize, a: *const f32, asrc: ASrc, b: Rows, cols: usize, out: Store) {
        #[cfg(target_arch = "x86_64")]
        match self.level {
            Level::Avx512 => {
                // The column bias and the transposed store in their own builds of the
                // tile, so that every other product's tile is as before them (with them
                // compiled in, ResNet-56's convolutions took 3 % longer).
                let ext = out.transposed || !out.cbias.is_null();
                macro_rules! t512 {
                    ($nv:literal, $offs:literal, $masked:literal) => {
                        match (out.rows, ext) {
                            (5.., true) => x86::tile512::<$nv, $offs, $masked, 8, true>(
                                kc, a, asrc, b, cols, out,
                            ),
                            (3 | 4, true) => x86::tile512::<$nv, $offs, $masked, 4, true>(
                                kc, a, asrc, b, cols, out,
                            ),
                            (_, true) => x86::tile512::<$nv, $offs, $masked, 2, true>(
                                kc, a, asrc, b, cols, out,
                            ),
                            (5.., false) => x86::tile512::<$nv, $offs, $masked, 8, false>(
                                kc, a, asrc, b, cols, out,
                            ),
                            (3 | 4, false) => x86::tile512::<$nv, $offs, $masked, 4, false>(
                                kc, a, asrc, b, cols, out,
                            ),
                            (_, false) => x86::tile512::<$nv, $offs, $masked, 2, false>(
                                kc, a, asrc, b, cols, out,
                            ),
                        }
                    };
                }
                match (
                    cols.div_ceil(16),
                    b.offs.is_null(),
                    !cols.is_multiple_of(16),
                ) {
                    (1, true, false) => t512!(1, false, false),
                    (_, true, false) => t512!(2, false, false),
                    (1, false, false) => t512!(1, true, false),
                    (_, false, false) => t512!(2, true, false),
                    (1, true, true) => t512!(1, false, true),
                    (_, true, true) => t512!(2, false, true),
                    (1, false, true) => t512!(1, true, true),
                    (_, false, true) => t512!(2, true, true),
                }
            }
            // A tile of whole vectors takes plain loads and stores: AVX2's masked ones
            // (`vmaskmovps`, once per step for B and once per tile for C) made the whole
            // tiles up to 1.5x slower on AMD EPYC (Zen 3; docs/performance.md).
            Level::Avx2 => {
                // The tile's rows: a whole panel, or the fewest of 4 and 2 that cover a
                // partial last panel (M = 128 is 21 panels of 6 and one of 2).
                // The column bias in its own build of the tile, as at AVX-512.
                let ext = !out.cbias.is_null();
                macro_rules! rows_tile {
                    ($nv:literal, $offs:literal, $masked:literal) => {
                        match (out.rows, ext) {
                            (5.., false) => x86::tile256::<$nv, $offs, $masked, 6, false>(
                                kc, a, asrc, b, cols, out,
                            ),
                            (3 | 4, false) => x86::tile256::<$nv, $offs, $masked, 4, false>(
                                kc, a, asrc, b, cols, out,
                            ),
                            (_, false) => x86::tile256::<$nv, $offs, $masked, 2, false>(
                                kc, a, asrc, b, cols, out,
                            ),
                            (5.., true) => x86::tile256::<$nv, $offs, $masked, 6, true>(
                                kc, a, asrc, b, cols, out,
                            ),
                            (3 | 4, true) => x86::tile256::<$nv, $offs, $masked, 4, true>(
                                kc, a, asrc, b, cols, out,
                            ),
                            (_, true) => x86::tile256::<$nv, $offs, $masked, 2, true>(
                                kc, a, asrc, b, cols, out,
                            ),
                        }
                    };
                }
                match (cols.div_ceil(8), b.offs.is_null(), !cols.is_multiple_of(8)) {
                    (1, true, false) => rows_tile!(1, false, false),
                    (_, true, false) => rows_tile!(2, false, false),
                    (1, false, false) => rows_tile!(1, true, false),
                    (_, false, false) => rows_tile!(2, true, false),
                    (1, true, true) => rows_tile!(1, false, true),
                    (_, true, true) => rows_tile!(2, false, true),
                    (1, false, true) => rows_tile!(1, true, true),
                    (_, false, true) => rows_tile!(2, true, true),
                }
            }
            _ => unreachable!("Kernel is only built for AVX2 and AVX-512"),
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            let _ = (kc, a, asrc, b, cols, out);
            unreachable!("Kernel is only built on x86-64")
        }
    }
}

/// Packs `rows × depth` values (element (i, p) at `src[i * rs + p * cs]`) in panels of
/// `width` rows, each depth-major (`width` values of column p, then of p + 1, …), the last
/// panel zero-padded: `out` holds `⌈rows / width⌉ · width · depth` values.
#[allow(clippy::too_many_arguments)]
fn pack_panels(
    what: &str,
    src: &[f32],
    rows: usize,
    depth: usize,
    rs: usize,
    cs: usize,
    width: usize,
    out: &mut [f32],
) -> Result<(), KernelError> {
    let need = ceil_to(rows, width)
        .and_then(|r| r.checked_mul(depth))
        .ok_or_else(|| invalid(format!("sgemm: packed {what} of {rows}×{depth} overflows")))?;
    let have = span(rows, depth, rs, cs)
        .ok_or_else(|| invalid(format!("sgemm: {what} of {rows}×{depth} overflows")))?;
    if out.len() != need || src.len() < have {
        return Err(invalid(format!(
            "sgemm: packing {what} needs {have} values in and {need} out, got {} and {}",
            src.len(),
            out.len()
        )));
    }
    for (p, panel) in out.chunks_exact_mut((width * depth).max(1)).enumerate() {
        let i0 = p * width;
        let n = width.min(rows - i0);
        // Unit stride along the depth and at most 8 rows: the panel is an `n × depth` block
        // transposed 8 columns at a time by an AVX2 8×8 transpose (the CPU has AVX2
        // wherever a kernel exists).
        #[cfg(target_arch = "x86_64")]
        if cs == 1 && depth >= 8 && width <= 8 {
            // SAFETY: rows i0..i0 + n have depth values at stride rs (`have` above); the
            // panel holds width·depth values; the CPU has AVX2 (a Kernel exists).
            unsafe { x86::pack_panel(&src[i0 * rs..], rs, n, depth, width, panel) };
            continue;
        }
        if rs == 1 {
            // Rows adjacent (a column-major source, a transposed A): each depth step's `n`
            // values are consecutive, one copy.
            for (kk, dst) in panel.chunks_exact_mut(width).enumerate() {
                dst[..n].copy_from_slice(&src[i0 + kk * cs..][..n]);
                dst[n..].fill(0.0);
            }
            continue;
        }
        for (kk, dst) in panel.chunks_exact_mut(width).enumerate() {
            for (r, d) in dst.iter_mut().enumerate() {
                *d = if r < n {
                    src[(i0 + r) * rs + kk * cs]
                } else {
                    0.0
                };
            }
        }
    }
    Ok(())
}

/// Where the microkernel finds row t of its B block: `ptr + t·ld`, or `ptr + offs[t]` when
/// `offs` is not null; vector v of a row starts `vec_off[v]` after the row's start (`v ·
/// lanes`, except for [`Right::Runs`]).
#[derive(Clone, Copy)]
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))] // read by the x86 tiles only
struct Rows {
    ptr: *const f32,
    ld: usize,
    offs: *const usize,
    vec_off: [usize; 2],
    /// A packed panel, read once in order: prefetched ahead.
    packed: bool,
}

/// One checked product for [`Kernel::run_block`]: the operands as pointers (B's as
/// [`Kernel::gemm_split`] resolved it), C's first element and stride.
#[derive(Clone, Copy)]
struct Job<'a> {
    n: usize,
    k: usize,
    a: Left<'a>,
    b_ptr: *const f32,
    b_panel_stride: usize,
    ldb: usize,
    offs: *const usize,
    runs: Option<(usize, &'a [usize])>,
    packed_b: bool,
    c: *mut f32,
    ldc: usize,
    /// C stored transposed ([`Kernel::gemm_transposed`]).
    transposed: bool,
    accumulate: bool,
    ep: Epilogue<'a>,
}

/// How C is laid out: row-major with a row stride, or transposed
/// ([`Kernel::gemm_transposed`]).
#[derive(Clone, Copy)]
enum CLayout {
    RowMajor(usize),
    Transposed(usize),
}

/// Where a tile reads A: row r of its step pointer at `min(r, rows − 1)·rs`, the pointer
/// moving `step` a step; `packed` when that is a packed panel (prefetched ahead).
#[derive(Clone, Copy)]
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
struct ASrc {
    rs: usize,
    step: usize,
    packed: bool,
}

// SAFETY: a job's pointers come from slices borrowed for its lifetime `'a` (B's values and
// offsets read only; C's, which `gemm_split` borrows mutably for the whole call); the
// blocks that share it on the pool write disjoint parts of C.
unsafe impl Send for Job<'_> {}
unsafe impl Sync for Job<'_> {}

/// Where and how a tile stores its `rows` rows of C (stride `ldc`): added to C's values
/// (`acc`), its sums started from `bias[r]` (null: from zero), plus `add`'s values (laid out
/// as C; null: none), clamped (`None`: not).
#[derive(Clone, Copy)]
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))] // read by the x86 tiles only
struct Store {
    c: *mut f32,
    ldc: usize,
    /// C transposed: element (r, j) of the tile at `c[j·ldc + r]`.
    transposed: bool,
    rows: usize,
    acc: bool,
    bias: *const f32,
    /// The tile's columns' bias (null: none).
    cbias: *const f32,
    add: *const f32,
    clamp: Option<Clamp>,
}

#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
impl Rows {
    /// Row `t`.
    ///
    /// # Safety
    /// As for the tile: row `t` exists.
    #[inline(always)]
    unsafe fn row<const OFFS: bool>(&self, t: usize) -> *const f32 {
        if OFFS {
            self.ptr.add(*self.offs.add(t))
        } else {
            self.ptr.add(t * self.ld)
        }
    }
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use super::*;

    /// How far ahead in a packed A panel the tiles prefetch, in floats (2 KiB: about a
    /// DRAM latency of 100 ns at the 8 floats an AVX-512 step consumes in ~8 cycles). Not
    /// tuned: the first distance tried.
    const A_AHEAD: usize = 512;

    /// How far ahead in a packed B panel the AVX-512 tiles prefetch, in floats (1 KiB; B
    /// advances 32 floats a step, two lines). A weight packed as B (a linear layer's, a
    /// convolution's taken transposed) comes from beyond the caches once per run, as a
    /// packed A does; without it, 1 × 1 convolutions on 7 × 7 maps taken transposed were
    /// 0.86x the planar product with their filters out of cache (1.06x in cache). Not
    /// tuned.
    const B_AHEAD: usize = 2048;

    /// Where row r of a tile's first `MR` rows of A is, relative to its step pointer, and
    /// how far the pointer moves per step (`a.step`): packed, row r at r (a partial panel's
    /// missing rows are zeros); in place, at `min(r, rows − 1)·rs` (the rows past a partial
    /// panel re-read its last row).
    #[inline(always)]
    pub(super) fn a_offsets<const MR: usize>(a: ASrc, rows: usize) -> ([usize; MR], usize) {
        if a.packed {
            (std::array::from_fn(|r| r), a.step)
        } else {
            let last = rows.max(1) - 1;
            (std::array::from_fn(|r| r.min(last) * a.rs), a.step)
        }
    }

    /// The tile's sums (8 rows × `NV` vectors of 16 columns) stored transposed: column j of
    /// the tile (`j < cols`) to `c[j·ldc ..][..rows]`, plus the values there when
    /// accumulating, plus `add`'s (laid out alike; null: none), clamped. Each vector's 8 rows are transposed as two 8 × 8 blocks
    /// (`simd::transpose8x8`), giving 16 runs of 8 rows; a partial panel (`rows < 8`)
    /// stores under a lane mask.
    #[inline(never)]
    #[target_feature(enable = "avx512f,avx512vl,avx2")]
    unsafe fn store_transposed<const NV: usize>(
        acc: &[[__m512; NV]; 8],
        (c, add): (*mut f32, *const f32),
        ldc: usize,
        rows: usize,
        cols: usize,
        accumulate: bool,
        clamp: Option<Clamp>,
    ) {
        let m: __mmask8 = if rows >= 8 { 0xff } else { (1u8 << rows) - 1 };
        // Vector v of every row at once: an index, not an iterator over one row.
        #[allow(clippy::needless_range_loop)]
        for v in 0..NV {
            for half in 0..2 {
                let mut t: [__m256; 8] = std::array::from_fn(|r| {
                    let x = _mm512_castps_pd(acc[r][v]);
                    _mm256_castpd_ps(if half == 0 {
                        _mm512_castpd512_pd256(x)
                    } else {
                        _mm512_extractf64x4_pd::<1>(x)
                    })
                });
                crate::simd::transpose8x8(&mut t);
                for (l, y) in t.iter().enumerate() {
                    let j = 16 * v + 8 * half + l;
                    if j >= cols {
                        break;
                    }
                    let p = c.add(j * ldc);
                    let mut y = *y;
                    if accumulate {
                        y = _mm256_add_ps(y, _mm256_maskz_loadu_ps(m, p));
                    }
                    if !add.is_null() {
                        y = _mm256_add_ps(y, _mm256_maskz_loadu_ps(m, add.add(j * ldc)));
                    }
                    if let Some(cl) = clamp {
                        y = cl.apply_m256(y);
                    }
                    if m == 0xff {
                        _mm256_storeu_ps(p, y);
                    } else {
                        _mm256_mask_storeu_ps(p, m, y);
                    }
                }
            }
        }
    }

    /// AVX-512F tile: `MR` rows (8, a whole panel; 4 or 2 for a partial last panel of at
    /// most that many rows, so that a 1- or 2-row product does not pay for 8: a 1 × 1
    /// convolution on a 1 × 1 map, batch 2, is a 2-row product) × `NV` vectors of 16
    /// columns; with `MASKED` the last vector
    /// under a mask of `cols − 16·(NV − 1)` lanes, else every vector whole. Whole vectors
    /// take plain loads and stores: on AMD EPYC Zen 5 (AVX-512), masked stores into lines
    /// not in cache (C no longer filled with a bias first) took MobileNetV2's 16 → 96-channel
    /// 1 × 1 convolution from 566 to 1426 µs and the depthwise layer reading its output from
    /// 227 to 612 µs; stored whole, 685 and 380 (a temporary instrumented build's per-run
    /// kernel times, docs/performance.md). With `EXT` the tile also starts its sums from a
    /// column bias and stores transposed where `out` says so; without, it ignores both
    /// (the caller builds `EXT` only for such stores).
    #[allow(clippy::too_many_arguments)]
    #[target_feature(enable = "avx512f")]
    pub(super) unsafe fn tile512<
        const NV: usize,
        const OFFS: bool,
        const MASKED: bool,
        const MR: usize,
        const EXT: bool,
    >(
        kc: usize,
        a: *const f32,
        asrc: ASrc,
        b: Rows,
        cols: usize,
        out: Store,
    ) {
        let Store {
            c,
            ldc,
            transposed,
            rows,
            acc: accumulate,
            bias,
            cbias,
            add,
            clamp,
        } = out;
        let last = cols - 16 * (NV - 1);
        let tail: __mmask16 = if last >= 16 {
            0xffff
        } else {
            (1u16 << last) - 1
        };
        let mut acc = [[_mm512_setzero_ps(); NV]; MR];
        if !bias.is_null() {
            // Rows past `rows` (a partial panel) repeat the last bias; never stored.
            for (r, row) in acc.iter_mut().enumerate() {
                *row = [_mm512_set1_ps(*bias.add(r.min(rows - 1))); NV];
            }
        }
        if EXT && !cbias.is_null() {
            let bv: [__m512; NV] = std::array::from_fn(|v| {
                if MASKED && v + 1 == NV {
                    _mm512_maskz_loadu_ps(tail, cbias.add(16 * v))
                } else {
                    _mm512_loadu_ps(cbias.add(16 * v))
                }
            });
            acc = [bv; MR];
        }
        let (aoff, step) = a_offsets::<MR>(asrc, rows);
        let packed = asrc.packed;
        let mut ap = a;
        for t in 0..kc {
            if packed {
                // The packed panel is read once, in order: ask for it A_AHEAD floats early
                // (a prefetch past the end reads nothing and faults nothing).
                _mm_prefetch::<_MM_HINT_T0>(ap.wrapping_add(A_AHEAD) as *const i8);
            }
            let bp = b.row::<OFFS>(t);
            if b.packed {
                // Likewise a packed B panel, NV vectors (lines) a step.
                for v in 0..NV {
                    let q = bp.wrapping_add(B_AHEAD + 16 * v);
                    _mm_prefetch::<_MM_HINT_T0>(q as *const i8);
                }
            }
            let mut bv = [_mm512_setzero_ps(); NV];
            for (v, x) in bv.iter_mut().enumerate() {
                *x = if MASKED && v + 1 == NV {
                    _mm512_maskz_loadu_ps(tail, bp.add(b.vec_off[v]))
                } else {
                    _mm512_loadu_ps(bp.add(b.vec_off[v]))
                };
            }
            for (r, row) in acc.iter_mut().enumerate() {
                let av = _mm512_set1_ps(*ap.add(aoff[r]));
                for (x, y) in row.iter_mut().zip(bv.iter()) {
                    *x = _mm512_fmadd_ps(av, *y, *x);
                }
            }
            ap = ap.add(step);
        }
        if EXT && transposed {
            // A copy goes out by reference, so that the sums themselves never have their
            // address taken and stay in registers through the loop above (passing `&acc`
            // kept them in memory: MobileNetV2's 7 × 7 products 2.6x slower).
            // The transposed store turns 8 rows; a shorter tile's missing rows are zeros,
            // never stored (`rows ≤ MR`).
            let mut sums = [[_mm512_setzero_ps(); NV]; 8];
            sums[..MR].copy_from_slice(&acc);
            store_transposed::<NV>(&sums, (c, add), ldc, rows, cols, accumulate, clamp);
            return;
        }
        for (r, row) in acc.iter().enumerate() {
            if r >= rows {
                break;
            }
            for (v, x) in row.iter().enumerate() {
                let m = if MASKED && v + 1 == NV { tail } else { 0xffff };
                let p = c.add(r * ldc + 16 * v);
                let mut y = *x;
                if accumulate {
                    y = _mm512_add_ps(y, _mm512_maskz_loadu_ps(m, p));
                }
                if !add.is_null() {
                    y = _mm512_add_ps(y, _mm512_maskz_loadu_ps(m, add.add(r * ldc + 16 * v)));
                }
                if let Some(cl) = clamp {
                    y = cl.apply_m512(y);
                }
                if m == 0xffff {
                    _mm512_storeu_ps(p, y);
                } else {
                    _mm512_mask_storeu_ps(p, m, y);
                }
            }
        }
    }

    /// One panel of packed A from a row-major block: `rows ≤ mr ≤ 8` rows of `k ≥ 8` values
    /// at stride `rs` (missing rows packed as zeros) into `panel` (`mr · k` values, k-major).
    ///
    /// # Safety
    /// `block` holds rows `0..rows` of `k` values at stride `rs` (checked by slicing);
    /// `panel.len() == mr · k`; the CPU has AVX2.
    #[target_feature(enable = "avx2")]
    pub(super) unsafe fn pack_panel(
        block: &[f32],
        rs: usize,
        rows: usize,
        k: usize,
        mr: usize,
        panel: &mut [f32],
    ) {
        assert!(panel.len() == mr * k && rows <= mr && mr <= 8 && k >= 8);
        let mut src: [&[f32]; 8] = [&[]; 8];
        for (r, s) in src.iter_mut().enumerate().take(rows) {
            *s = &block[r * rs..][..k];
        }
        let src = &src[..rows];
        let out = panel.as_mut_ptr();
        let mut kk = 0;
        while kk + 8 <= k {
            let mut v = [_mm256_setzero_ps(); 8];
            for (x, row) in v.iter_mut().zip(src) {
                *x = _mm256_loadu_ps(row.as_ptr().add(kk));
            }
            crate::simd::transpose8x8(&mut v);
            for (j, x) in v.iter().enumerate() {
                let dst = out.add((kk + j) * mr);
                if mr == 8 {
                    _mm256_storeu_ps(dst, *x);
                } else {
                    let mut lanes = [0.0f32; 8];
                    _mm256_storeu_ps(lanes.as_mut_ptr(), *x);
                    std::ptr::copy_nonoverlapping(lanes.as_ptr(), dst, mr);
                }
            }
            kk += 8;
        }
        for t in kk..k {
            let dst = std::slice::from_raw_parts_mut(out.add(t * mr), mr);
            for (r, d) in dst.iter_mut().enumerate() {
                *d = src.get(r).map_or(0.0, |row| row[t]);
            }
        }
    }

    /// Lane mask of the first `n` of 8 lanes, for `maskload`/`maskstore`.
    #[target_feature(enable = "avx2")]
    unsafe fn mask8(n: usize) -> __m256i {
        let idx = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
        _mm256_cmpgt_epi32(_mm256_set1_epi32(n as i32), idx)
    }

    /// AVX2 + FMA tile: `MR` rows (6, a whole panel; 4 or 2 for the last panel's `rows`,
    /// so that a partial panel does not cost a whole one) × `NV` vectors of 8 columns; with
    /// `MASKED` the last vector under a mask of `cols − 8·(NV − 1)` lanes, else every vector
    /// whole (`cols = 8·NV`). Packed A advances a whole panel (6) per step. With `EXT` the
    /// sums start from a column bias where `out` has one; without, it is ignored.
    #[allow(clippy::too_many_arguments)]
    #[target_feature(enable = "avx2,fma")]
    pub(super) unsafe fn tile256<
        const NV: usize,
        const OFFS: bool,
        const MASKED: bool,
        const MR: usize,
        const EXT: bool,
    >(
        kc: usize,
        a: *const f32,
        asrc: ASrc,
        b: Rows,
        cols: usize,
        out: Store,
    ) {
        let Store {
            c,
            ldc,
            transposed,
            rows,
            acc: accumulate,
            bias,
            cbias,
            add,
            clamp,
        } = out;
        debug_assert!(
            !transposed,
            "a transposed C at AVX2 (refused by the checks)"
        );
        let tail = mask8(cols - 8 * (NV - 1));
        let mut acc = [[_mm256_setzero_ps(); NV]; MR];
        if !bias.is_null() {
            // Rows past `rows` (a partial panel) repeat the last bias; never stored.
            for (r, row) in acc.iter_mut().enumerate() {
                *row = [_mm256_set1_ps(*bias.add(r.min(rows - 1))); NV];
            }
        }
        if EXT && !cbias.is_null() {
            let bv: [__m256; NV] = std::array::from_fn(|v| {
                if MASKED && v + 1 == NV {
                    _mm256_maskload_ps(cbias.add(8 * v), tail)
                } else {
                    _mm256_loadu_ps(cbias.add(8 * v))
                }
            });
            acc = [bv; MR];
        }
        let (aoff, step) = a_offsets::<MR>(asrc, rows);
        let packed = asrc.packed;
        let mut ap = a;
        for t in 0..kc {
            if packed {
                // As in `tile512`.
                _mm_prefetch::<_MM_HINT_T0>(ap.wrapping_add(A_AHEAD) as *const i8);
            }
            let bp = b.row::<OFFS>(t);
            let mut bv = [_mm256_setzero_ps(); NV];
            for (v, x) in bv.iter_mut().enumerate() {
                *x = if MASKED && v + 1 == NV {
                    _mm256_maskload_ps(bp.add(b.vec_off[v]), tail)
                } else {
                    _mm256_loadu_ps(bp.add(b.vec_off[v]))
                };
            }
            for (r, row) in acc.iter_mut().enumerate() {
                let av = _mm256_broadcast_ss(&*ap.add(aoff[r]));
                for (x, y) in row.iter_mut().zip(bv.iter()) {
                    *x = _mm256_fmadd_ps(av, *y, *x);
                }
            }
            ap = ap.add(step);
        }
        for (r, row) in acc.iter().enumerate() {
            if r >= rows {
                break;
            }
            for (v, x) in row.iter().enumerate() {
                let p = c.add(r * ldc + 8 * v);
                let mut y = *x;
                let masked = MASKED && v + 1 == NV;
                if accumulate {
                    let old = if masked {
                        _mm256_maskload_ps(p, tail)
                    } else {
                        _mm256_loadu_ps(p)
                    };
                    y = _mm256_add_ps(y, old);
                }
                if !add.is_null() {
                    let q = add.add(r * ldc + 8 * v);
                    let d = if masked {
                        _mm256_maskload_ps(q, tail)
                    } else {
                        _mm256_loadu_ps(q)
                    };
                    y = _mm256_add_ps(y, d);
                }
                if let Some(cl) = clamp {
                    y = cl.apply_m256(y);
                }
                if masked {
                    _mm256_maskstore_ps(p, tail, y);
                } else {
                    _mm256_storeu_ps(p, y);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vals(n: usize, seed: u64) -> Vec<f32> {
        tensorforge_core::rng::SplitMix64::f32_pm1_vec(seed, n)
    }

    /// f64 reference of C (+)= A·B over strided A and row-major B.
    #[allow(clippy::too_many_arguments)]
    fn reference(
        m: usize,
        n: usize,
        k: usize,
        a: &[f32],
        rs: usize,
        cs: usize,
        b: &[f32],
        ldb: usize,
        c0: &[f32],
        ldc: usize,
        acc: bool,
    ) -> Vec<f64> {
        let mut out: Vec<f64> = c0.iter().map(|&x| x as f64).collect();
        for i in 0..m {
            for j in 0..n {
                let s: f64 = (0..k)
                    .map(|p| a[i * rs + p * cs] as f64 * b[p * ldb + j] as f64)
                    .sum();
                out[i * ldc + j] = if acc { out[i * ldc + j] + s } else { s };
            }
        }
        out
    }

    /// `A·B` (`m × n`) for row-major A, through `kern`.
    fn product(
        kern: Kernel,
        (m, n, k): (usize, usize, usize),
        a: &[f32],
        right: Right,
    ) -> Result<Vec<f32>, KernelError> {
        let mut ap = vec![0.0; kern.packed_a_len(m, k).unwrap()];
        kern.pack_a(a, m, k, k, 1, &mut ap)?;
        let mut c = vec![0.0; m * n];
        kern.gemm(m, n, k, &ap, right, &mut c, n, false)?;
        Ok(c)
    }

    #[test]
    fn an_avx2_block_read_in_place_ends_in_tiles_of_four_rows() {
        let Some(kern) = Kernel::for_level(Level::Avx2) else {
            eprintln!("no AVX2 sgemm kernel on this CPU; the test has nothing to check");
            return;
        };
        let tiles = |mut left: usize, in_place: bool| {
            let mut out = Vec::new();
            while left > 0 {
                let r = kern.tile_rows(left, in_place);
                out.push(r);
                left -= r;
            }
            out
        };
        // 128 rows = 20 tiles of 6 (120) + 4 + 4; packed, 21 of 6 (126) + 2.
        let mut want = vec![6; 20];
        want.extend([4, 4]);
        assert_eq!(tiles(128, true), want);
        let mut want = vec![6; 21];
        want.push(2);
        assert_eq!(tiles(128, false), want);
        // 13 = 6 + 4 + 3 in place; 6 rows or fewer are one tile.
        assert_eq!(tiles(13, true), [6, 4, 3]);
        assert_eq!(tiles(6, true), [6]);
        assert_eq!(tiles(2, true), [2]);
        // The M block: 256 KiB of A at k = 256 is ⌊262144 / (4·256·6)⌋ = 42 panels = 252
        // rows; at the full depth kc = 512, 21 panels = 126 rows.
        assert_eq!(kern.mc_for(256), 252);
        assert_eq!(kern.mc_for(kern.kc()), 126);
        assert_eq!(kern.mc(), 126);
    }

    fn kernels() -> Vec<Kernel> {
        [Level::Avx2, Level::Avx512]
            .into_iter()
            .filter_map(Kernel::for_level)
            .collect()
    }

    #[test]
    fn every_edge_and_layout_matches_the_reference() {
        // Shapes straddling every tile edge: rows around mr (6, 8), columns around one and
        // two vectors (8, 16, 32), K around one block (kc: 256 at AVX-512, 512 at AVX2),
        // and rows past one M block (mc: 256 and 126 rows) with K past two blocks.
        let shapes = [
            (300, 20, 1100),
            (130, 9, 513),
            (1, 1, 1),
            (5, 7, 3),
            (6, 16, 9),
            (8, 32, 17),
            (9, 33, 31),
            (13, 47, 255),
            (16, 64, 256),
            (17, 50, 257),
            (3, 100, 600),
            (40, 5, 70),
            // Partial panels that take the shorter AVX-512 tiles: 2 rows (1–2 left) and 4
            // rows (3–4 left), alone and after whole panels (8 + 2, 8 + 4).
            (2, 33, 5),
            (4, 40, 30),
            (10, 17, 12),
            (12, 64, 7),
            // 128 = 20·6 + 4 + 4 rows read in place at AVX2, one M block at k = 256.
            (128, 24, 256),
            // Columns past one block of B (B_BLOCK_BYTES / (4·kc) columns, 128 KiB): at
            // AVX-512 the first K block (kc = 256) runs 600 columns as 128·4 + 88, the
            // second (44) as one block (744 → 736 columns); at AVX2 kc = 300 gives blocks of
            // ⌊109.2⌋ → 96 columns, six of them and one of 24.
            (9, 600, 300),
        ];
        let ks = kernels();
        if ks.is_empty() {
            eprintln!("no sgemm kernel on this CPU; the test has nothing to check");
        }
        for kern in ks {
            for (si, &(m, n, k)) in shapes.iter().enumerate() {
                for (transposed_a, packed_b, acc) in [
                    (false, false, false),
                    (true, false, true),
                    (false, true, true),
                    (true, true, false),
                ] {
                    let a = vals(m * k, 10 + si as u64);
                    let (rs, cs) = if transposed_a { (1, m) } else { (k, 1) };
                    let ldb = n + 3;
                    let b = vals(k * ldb, 20 + si as u64);
                    let ldc = n + 2;
                    let c0 = vals(m * ldc, 30 + si as u64);
                    let mut ap = vec![f32::NAN; kern.packed_a_len(m, k).unwrap()];
                    kern.pack_a(&a, m, k, rs, cs, &mut ap).unwrap();
                    let mut bp = vec![f32::NAN; kern.packed_b_len(k, n).unwrap()];
                    kern.pack_b(&b, k, n, ldb, 1, &mut bp).unwrap();
                    let right = if packed_b {
                        Right::Packed(&bp)
                    } else {
                        Right::RowMajor { data: &b, ld: ldb }
                    };
                    let mut c = c0.clone();
                    kern.gemm(m, n, k, &ap, right, &mut c, ldc, acc).unwrap();
                    if !transposed_a {
                        // A read in place (row stride k + 5, the gaps NaN, the slice ending
                        // at row m's last value): the same products in the same order as
                        // packed, so the same bits.
                        let lda = k + 5;
                        let mut ar = vec![f32::NAN; (m - 1) * lda + k];
                        for i in 0..m {
                            ar[i * lda..i * lda + k].copy_from_slice(&a[i * k..(i + 1) * k]);
                        }
                        let mut c2 = c0.clone();
                        let left = Left::RowMajor { data: &ar, ld: lda };
                        kern.gemm_left(m, n, k, left, right, &mut c2, ldc, acc)
                            .unwrap();
                        assert_eq!(c2, c, "{kern:?} {m}×{n}×{k} row-major A pb={packed_b}");
                    }
                    let want = reference(m, n, k, &a, rs, cs, &b, ldb, &c0, ldc, acc);
                    for i in 0..m {
                        for j in 0..ldc {
                            let (got, w) = (c[i * ldc + j] as f64, want[i * ldc + j]);
                            if j >= n {
                                // Columns past n are not C's: untouched.
                                assert_eq!(got, c0[i * ldc + j] as f64, "{kern:?} pad column");
                                continue;
                            }
                            // Each term |a·b| ≤ 1, so the f32 sum's error is below
                            // k · 2^-24 · (k + 1) ≈ k²·6e-8; 1e-6·k·(k+1) bounds it loosely.
                            let tol = 1e-6 * (k as f64) * (k as f64 + 1.0) + 1e-6;
                            assert!(
                                (got - w).abs() <= tol,
                                "{kern:?} {m}×{n}×{k} ta={transposed_a} pb={packed_b} \
                                 acc={acc} ({i},{j}): {got} vs {w}"
                            );
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn rows_at_offsets_equal_the_gathered_matrix() {
        // B's rows taken from a pool at scattered, overlapping offsets: the product equals
        // the one over B gathered row by row into a row-major matrix, bit for bit (the same
        // values in the same order), including past a K block (k = 300 > 256).
        for kern in kernels() {
            for &(m, n, k) in &[(8, 33, 300), (5, 17, 9), (16, 286, 144)] {
                let pool = vals(4 * n + 3 * k, 7);
                let offsets: Vec<usize> = (0..k).map(|t| (t * 7919) % (pool.len() - n)).collect();
                let gathered: Vec<f32> = offsets
                    .iter()
                    .flat_map(|&o| pool[o..o + n].iter().copied())
                    .collect();
                let a = vals(m * k, 8);
                let rm = Right::RowMajor {
                    data: &gathered,
                    ld: n,
                };
                let want = product(kern, (m, n, k), &a, rm).unwrap();
                let ro = Right::Offsets {
                    data: &pool,
                    offsets: &offsets,
                };
                let got = product(kern, (m, n, k), &a, ro).unwrap();
                assert_eq!(got, want, "{kern:?} {m}×{n}×{k}");
                // An offset whose row would end past the pool is refused.
                let mut bad = offsets.clone();
                bad[k - 1] = pool.len() - n + 1;
                let rb = Right::Offsets {
                    data: &pool,
                    offsets: &bad,
                };
                assert!(product(kern, (m, n, k), &a, rb).is_err());
            }
        }
    }

    #[test]
    fn runs_equal_the_gathered_matrix() {
        // Columns in runs of `run` (one and two vectors) at scattered offsets, rows at their
        // own offsets, n not a multiple of the run: bit for bit the product over B gathered
        // into a row-major matrix.
        for kern in kernels() {
            let w = kern.lanes();
            for &(m, run, nruns, last, k) in &[(8, w, 16, w, 144), (13, 2 * w, 3, 5, 300)] {
                let n = run * (nruns - 1) + last;
                let pool = vals(64 * n + 5 * k, 11);
                let offsets: Vec<usize> = (0..k).map(|t| (t * 389) % (3 * k)).collect();
                let run_offsets: Vec<usize> = (0..nruns)
                    .map(|r| 3 * k + (nruns - r) * (run + 3))
                    .collect();
                let gathered: Vec<f32> = offsets
                    .iter()
                    .flat_map(|&o| {
                        let ro = &run_offsets;
                        let pool = &pool;
                        (0..n).map(move |j| pool[o + ro[j / run] + j % run])
                    })
                    .collect();
                let a = vals(m * k, 12);
                let rm = Right::RowMajor {
                    data: &gathered,
                    ld: n,
                };
                let want = product(kern, (m, n, k), &a, rm).unwrap();
                let rr = Right::Runs {
                    data: &pool,
                    offsets: &offsets,
                    run,
                    run_offsets: &run_offsets,
                };
                let got = product(kern, (m, n, k), &a, rr).unwrap();
                assert_eq!(got, want, "{kern:?} run {run}");
                // A run that is not whole vectors, and offsets past the values, are refused.
                let odd = Right::Runs {
                    data: &pool,
                    offsets: &offsets,
                    run: run - 1,
                    run_offsets: &run_offsets,
                };
                assert!(product(kern, (m, n, k), &a, odd).is_err());
                let mut far = run_offsets.clone();
                far[0] = pool.len();
                let past = Right::Runs {
                    data: &pool,
                    offsets: &offsets,
                    run,
                    run_offsets: &far,
                };
                assert!(product(kern, (m, n, k), &a, past).is_err());
            }
        }
    }

    #[test]
    fn the_epilogue_adds_bias_and_addend_and_clamps_as_the_ops_do() {
        // C = clamp(bias + A·B (+ D)) and clamp(C0 + bias + A·B (+ D)), D an addend laid out
        // as C (a residual), against an f64 reference, on
        // shapes with partial panels (rows, and columns of one and a half vectors), K past
        // one block (the bias only in the first block's sums, the addend and the clamp only
        // after the last), whole and masked tiles; the clamp's bounds sit inside the values' range so
        // that both bounds are reached. Then the ops' special values: ReLU (fmax) turns NaN
        // and −0 into 0, Clip keeps them.
        for kern in kernels() {
            let w = kern.lanes();
            for &(m, n, k) in &[
                (kern.panel_rows() + 3, w + w / 2, 300),
                (5, 2 * w, 9),
                (1, 3, 1),
            ] {
                let a = vals(m * k, 41);
                let b = vals(k * n, 42);
                let bias = vals(m, 43);
                let c0 = vals(m * n, 44);
                let d = vals(m * n, 45);
                let mut ap = vec![0.0; kern.packed_a_len(m, k).unwrap()];
                kern.pack_a(&a, m, k, k, 1, &mut ap).unwrap();
                for (acc, with_add) in [(false, false), (true, false), (false, true), (true, true)]
                {
                    for clamp in [
                        Clamp::NONE,
                        Clamp {
                            lo: -0.25,
                            hi: 0.5,
                            relu: false,
                        },
                        Clamp {
                            lo: 0.0,
                            hi: f32::INFINITY,
                            relu: true,
                        },
                    ] {
                        let mut c = c0.clone();
                        let ep = Epilogue {
                            row_bias: Some(&bias),
                            col_bias: None,
                            addend: with_add.then_some(&d[..]),
                            clamp,
                        };
                        let right = Right::RowMajor { data: &b, ld: n };
                        kern.gemm_with(m, n, k, Left::Packed(&ap), right, &mut c, n, acc, ep)
                            .unwrap();
                        let want = reference(m, n, k, &a, k, 1, &b, n, &c0, n, acc);
                        let (mut low, mut high) = (false, false);
                        for i in 0..m {
                            for j in 0..n {
                                let add = if with_add { d[i * n + j] as f64 } else { 0.0 };
                                let x = want[i * n + j] + bias[i] as f64 + add;
                                let y = x.max(clamp.lo as f64).min(clamp.hi as f64);
                                low |= x < clamp.lo as f64;
                                high |= x > clamp.hi as f64;
                                // As in the test above: k terms of |a·b| ≤ 1 plus the bias.
                                let tol = 1e-6 * (k as f64) * (k as f64 + 1.0) + 1e-6;
                                let got = c[i * n + j] as f64;
                                assert!(
                                    (got - y).abs() <= tol,
                                    "{kern:?} {m}×{n}×{k} acc={acc} add={with_add} {clamp:?} \
                                     ({i},{j}): {got} vs {y}"
                                );
                            }
                        }
                        if clamp.hi < 1.0 && m * n > 8 {
                            assert!(low && high, "both bounds reached");
                        }
                    }
                }
            }
            // One row, k = 1: A = [1], B = [NaN, −0, −2, 3, 7, 0]; bias 0 and −0 so that the sum
            // is exactly B's value (0·… + b keeps −0 only with a −0 bias: −0 + −0 = −0).
            let b = [f32::NAN, -0.0, -2.0, 3.0, 7.0, 0.0];
            let mut ap = vec![0.0; kern.packed_a_len(1, 1).unwrap()];
            kern.pack_a(&[1.0], 1, 1, 1, 1, &mut ap).unwrap();
            for (relu, want) in [
                (true, [0.0f32, 0.0, 0.0, 3.0, 6.0, 0.0]),
                (false, [f32::NAN, -0.0, 0.0, 3.0, 6.0, 0.0]),
            ] {
                let mut c = [1.0f32; 6];
                let ep = Epilogue {
                    row_bias: Some(&[-0.0]),
                    col_bias: None,
                    addend: None,
                    clamp: Clamp {
                        lo: 0.0,
                        hi: 6.0,
                        relu,
                    },
                };
                let right = Right::RowMajor { data: &b, ld: 6 };
                kern.gemm_with(1, 6, 1, Left::Packed(&ap), right, &mut c, 6, false, ep)
                    .unwrap();
                let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
                assert_eq!(bits(&c), bits(&want), "{kern:?} relu={relu}");
            }
            // A bias shorter than m, an addend shorter than C: errors, not reads past them.
            for (row_bias, addend) in [(Some(&[1.0f32][..]), None), (None, Some(&[1.0f32; 3][..]))]
            {
                let ep = Epilogue {
                    row_bias,
                    col_bias: None,
                    addend,
                    clamp: Clamp::NONE,
                };
                let right = Right::RowMajor {
                    data: &[1.0; 4],
                    ld: 2,
                };
                let left = Left::RowMajor {
                    data: &[1.0; 4],
                    ld: 2,
                };
                let mut c = [0.0f32; 4];
                let r = kern.gemm_with(2, 2, 2, left, right, &mut c, 2, false, ep);
                assert!(r.is_err(), "{ep:?}");
            }
        }
    }

    #[test]
    fn row_blocks_of_whole_panels_compose() {
        // Two calls over rows [0, mr) and [mr, m) give what one call over all rows gives,
        // bit for bit (the same tiles in the same order).
        for kern in kernels() {
            let (m, n, k) = (kern.panel_rows() * 3 - 1, 40, 300);
            let a = vals(m * k, 1);
            let b = vals(k * n, 2);
            let mut ap = vec![0.0; kern.packed_a_len(m, k).unwrap()];
            kern.pack_a(&a, m, k, k, 1, &mut ap).unwrap();
            let right = Right::RowMajor { data: &b, ld: n };
            let mut whole = vec![0.0; m * n];
            kern.gemm(m, n, k, &ap, right, &mut whole, n, false)
                .unwrap();
            let mut split = vec![0.0; m * n];
            let r = kern.panel_rows();
            let (top, bottom) = split.split_at_mut(r * n);
            kern.gemm(r, n, k, &ap, right, top, n, false).unwrap();
            let off = kern.a_panel_offset(r, k);
            kern.gemm(m - r, n, k, &ap[off..], right, bottom, n, false)
                .unwrap();
            assert_eq!(whole, split, "{kern:?}");
        }
    }

    #[test]
    fn short_slices_are_errors_not_reads() {
        for kern in kernels() {
            let ap = vec![0.0; kern.packed_a_len(4, 4).unwrap()];
            let b = vec![0.0; 15]; // 4×4 needs 16
            let mut c = vec![0.0; 16];
            let r = Right::RowMajor { data: &b, ld: 4 };
            assert!(kern.gemm(4, 4, 4, &ap, r, &mut c, 4, false).is_err());
            let b = vec![0.0; 16];
            let r = Right::RowMajor { data: &b, ld: 4 };
            assert!(kern.gemm(4, 4, 4, &ap[1..], r, &mut c, 4, false).is_err());
            assert!(kern.gemm(4, 4, 4, &ap, r, &mut c[1..], 4, false).is_err());
            assert!(kern.gemm(4, 4, 4, &ap, r, &mut c, 3, false).is_err());
            let mut out = vec![0.0; 3];
            assert!(kern.pack_a(&b, 4, 4, 4, 1, &mut out).is_err());
            // Row-major A: 4 rows of 4 at stride 4 need 16 values; a stride below k is wrong.
            let a = vec![0.0; 15];
            let l = Left::RowMajor { data: &a, ld: 4 };
            assert!(kern.gemm_left(4, 4, 4, l, r, &mut c, 4, false).is_err());
            let a = vec![0.0; 16];
            let l = Left::RowMajor { data: &a, ld: 3 };
            assert!(kern.gemm_left(4, 4, 4, l, r, &mut c, 4, false).is_err());
        }
    }

    #[test]
    fn k_zero_writes_zeros_or_keeps_c() {
        for kern in kernels() {
            let mut c = vec![5.0f32; 6];
            let r = Right::RowMajor { data: &[], ld: 3 };
            kern.gemm(2, 3, 0, &[], r, &mut c, 3, true).unwrap();
            assert_eq!(c, vec![5.0; 6]);
            kern.gemm(2, 3, 0, &[], r, &mut c, 3, false).unwrap();
            assert_eq!(c, vec![0.0; 6]);
        }
    }

    #[test]
    fn a_column_bias_starts_each_columns_sums() {
        for kern in kernels() {
            // Row-major C at both widths; a partial row panel and a masked column tail.
            let (m, n, k) = (11, 37, 20);
            let a = vals(m * k, 70);
            let b = vals(k * n, 71);
            let bias = vals(n, 72);
            // By hand: each sum from its column's bias, then k = 0, 1, … by fused
            // multiply-adds (one K block), so equal bit for bit.
            let want: Vec<f32> = (0..m * n)
                .map(|e| {
                    let (i, j) = (e / n, e % n);
                    (0..k).fold(bias[j], |s, p| a[i * k + p].mul_add(b[p * n + j], s))
                })
                .collect();
            let mut c = vec![f32::NAN; m * n];
            let ep = Epilogue {
                col_bias: Some(&bias),
                ..Epilogue::NONE
            };
            let left = Left::RowMajor { data: &a, ld: k };
            let right = Right::RowMajor { data: &b, ld: n };
            kern.gemm_split(m, n, k, left, right, &mut c, n, false, ep, 1)
                .unwrap();
            for (e, (x, y)) in c.iter().zip(&want).enumerate() {
                assert_eq!(
                    x.to_bits(),
                    y.to_bits(),
                    "{:?} at {e}: {x} vs {y}",
                    kern.level()
                );
            }
        }
    }

    #[test]
    fn a_transposed_c_from_a_column_major_a_equals_the_product_transposed() {
        for kern in kernels() {
            let (m, n, k) = (13, 40, 24);
            let a = vals(k * m, 1);
            let b = vals(k * n, 2);
            if kern.level() != Level::Avx512 {
                // Refused where the tile is not 8 rows of 16 lanes.
                let mut c = vec![0.0; m * n];
                let left = Left::ColMajor { data: &a, ld: m };
                let right = Right::RowMajor { data: &b, ld: n };
                let r =
                    kern.gemm_transposed(m, n, k, left, right, &mut c, m, false, Epilogue::NONE, 1);
                assert!(r.is_err());
                continue;
            }
            // (m, n, k): pixels × channels × input channels. A 7 × 7 map (49 rows: six whole
            // row panels and one of a single row), partial panels on both sides, n not a
            // multiple of 16 (the tail's columns not stored), K past one block (kc), one and
            // two workers, accumulating into C or not; 1, 2, 3 and 4 rows (the 2- and 4-row
            // tiles, their sums padded to 8 rows for the transposed store).
            for (si, &(m, n, k)) in [
                (49, 96, 160),
                (13, 40, 24),
                (200, 64, 300),
                (8, 7, 3),
                (1, 32, 112),
                (2, 20, 9),
                (3, 48, 17),
                (4, 16, 5),
            ]
            .iter()
            .enumerate()
            {
                let seed = 500 + 10 * si as u64;
                // A column-major with ld = m + 2: element (i, p) at p·(m + 2) + i; C
                // transposed with ldct = m + 3 (its gaps must stay as they were).
                let (lda, ldct) = (m + 2, m + 3);
                let a = vals(k * lda, seed);
                let b = vals(k * n, seed + 1);
                let bias = vals(n, seed + 2);
                let c0 = vals(n * ldct, seed + 3);
                // A residual laid out as C (transposed), added after the sums.
                let addend = vals(n * ldct, seed + 4);
                let clamp = Clamp {
                    lo: -0.5,
                    hi: 0.75,
                    relu: false,
                };
                let mut bp = vec![0.0; kern.packed_b_len(k, n).unwrap()];
                kern.pack_b(&b, k, n, n, 1, &mut bp).unwrap();
                for acc in [false, true] {
                    // By hand, in the module's order (so equal bit for bit): each K block of
                    // kc summed by fused multiply-adds in order, the first from the bias (and
                    // added to C when accumulating), each later one from zero and then added.
                    let mut want = vec![0f32; m * n];
                    for i in 0..m {
                        for j in 0..n {
                            let mut c = c0[j * ldct + i];
                            for p0 in (0..k).step_by(kern.kc()) {
                                let mut s = if p0 == 0 { bias[j] } else { 0.0 };
                                for p in p0..k.min(p0 + kern.kc()) {
                                    s = a[p * lda + i].mul_add(b[p * n + j], s);
                                }
                                c = if p0 == 0 && !acc { s } else { c + s };
                            }
                            want[i * n + j] = clamp.apply(c + addend[j * ldct + i]);
                        }
                    }
                    for workers in [1, 2] {
                        for (ri, right) in [Right::Packed(&bp), Right::RowMajor { data: &b, ld: n }]
                            .into_iter()
                            .enumerate()
                        {
                            let mut c = c0.clone();
                            let ep = Epilogue {
                                col_bias: Some(&bias),
                                addend: Some(&addend),
                                clamp,
                                ..Epilogue::NONE
                            };
                            let left = Left::ColMajor { data: &a, ld: lda };
                            kern.gemm_transposed(
                                m, n, k, left, right, &mut c, ldct, acc, ep, workers,
                            )
                            .unwrap();
                            for j in 0..n {
                                for i in 0..ldct {
                                    let got = c[j * ldct + i];
                                    let want = if i < m {
                                        want[i * n + j]
                                    } else {
                                        c0[j * ldct + i]
                                    };
                                    assert_eq!(
                                        got.to_bits(),
                                        want.to_bits(),
                                        "{m}×{n}×{k} acc {acc} at ({i}, {j}), {workers} workers, \
                                         B kind {ri}: {got} vs {want}"
                                    );
                                }
                            }
                        }
                    }
                }
            }
            // A row and a column bias together, a short addend, a short C are refused.
            let a = [1.0f32; 4];
            let left = Left::ColMajor { data: &a, ld: 2 };
            let right = Right::RowMajor { data: &a, ld: 1 };
            let mut c = vec![0.0; 16];
            let both = Epilogue {
                row_bias: Some(&[0.0; 2]),
                col_bias: Some(&[0.0]),
                ..Epilogue::NONE
            };
            let added = Epilogue {
                addend: Some(&[0.0; 1]),
                ..Epilogue::NONE
            };
            for ep in [both, added] {
                assert!(kern
                    .gemm_transposed(2, 1, 1, left, right, &mut c, 2, false, ep, 1)
                    .is_err());
            }
            let ep = Epilogue::NONE;
            assert!(kern
                .gemm_transposed(2, 1, 1, left, right, &mut c[..1], 2, false, ep, 1)
                .is_err());
        }
    }

    #[test]
    fn a_product_cut_into_blocks_equals_it_whole() {
        let ks = kernels();
        if ks.is_empty() {
            eprintln!("no sgemm kernel on this CPU; the test has nothing to check");
        }
        for kern in ks {
            let (mr, nr) = (kern.panel_rows(), kern.panel_cols());
            // The plan, by hand. 16 × 12544 on two workers: by rows 8 rows (1 panel) ×
            // 392 column panels = 392 tiles; by columns 2 × 196 = 392: a tie, cut across the
            // larger dimension, the columns (6272 each, a multiple of nr = 16 or 32).
            assert_eq!(
                kern.blocks(16, 12544, 2),
                [(0..16, 0..6272), (0..16, 6272..12544)]
            );
            // 960 × 49 on two: by rows 480 rows × ⌈49 / nr⌉ column panels, by columns
            // ⌈49/2⌉ = 25 → 32 columns (⌈32 / nr⌉ panels) × 960 / mr row panels: AVX-512
            // (8 × 32) 60·2 = 120 against 120·1, AVX2 (6 × 16) 80·4 = 320 against 160·2: a
            // tie at both widths, cut across the larger dimension, the rows.
            assert_eq!(
                kern.blocks(960, 49, 2),
                [(0..480, 0..49), (480..960, 0..49)]
            );
            // One worker, or a dimension too small to share: one block.
            assert_eq!(kern.blocks(7, 9, 1), [(0..7, 0..9)]);
            assert_eq!(kern.blocks(3, 5, 2), [(0..3, 0..5)]);
            // Every cut: starts on panel boundaries, the blocks tile C exactly once.
            for (m, n, w) in [(96, 196, 2), (24, 3136, 2), (50, 70, 3), (200, 40, 3)] {
                let bl = kern.blocks(m, n, w);
                assert!(bl.len() <= w);
                let mut hit = vec![0u8; m * n];
                for (r, c) in &bl {
                    assert!(r.start % mr == 0 && c.start % nr == 0, "{m}×{n}: {bl:?}");
                    for i in r.clone() {
                        for j in c.clone() {
                            hit[i * n + j] += 1;
                        }
                    }
                }
                assert!(hit.iter().all(|&h| h == 1), "{m}×{n} on {w}: {bl:?}");
            }
            // Results: each cut equals the whole product bit for bit, for every kind of B,
            // A packed and in place, with an epilogue, accumulating or not. Shapes cut by
            // columns (m < n) and by rows, partial panels, K past one block.
            let shapes = [(16, 200, 20), (24, 130, 300), (70, 40, 9), (13, 47, 33)];
            for (si, &(m, n, k)) in shapes.iter().enumerate() {
                let seed = 100 + 10 * si as u64;
                let a = vals(m * k, seed);
                let ldb = n + 5;
                let b = vals(k * ldb + 64, seed + 1);
                let ldc = n + 3;
                let c0 = vals(m * ldc, seed + 2);
                let bias = vals(m, seed + 3);
                let addend = vals(m * ldc, seed + 4);
                let mut ap = vec![0.0; kern.packed_a_len(m, k).unwrap()];
                kern.pack_a(&a, m, k, k, 1, &mut ap).unwrap();
                let mut bp = vec![0.0; kern.packed_b_len(k, n).unwrap()];
                kern.pack_b(&b, k, n, ldb, 1, &mut bp).unwrap();
                // Offsets: row p at p·ldb + (p % 3); Runs of 2·lanes columns, run r of row p
                // at p·ldb + r·run (a shifted copy of the row-major layout).
                let offsets: Vec<usize> = (0..k).map(|p| p * ldb + p % 3).collect();
                let run = 2 * kern.lanes();
                let run_offsets: Vec<usize> = (0..n.div_ceil(run)).map(|r| r * run).collect();
                let rights = [
                    Right::Packed(&bp),
                    Right::RowMajor { data: &b, ld: ldb },
                    Right::Offsets {
                        data: &b,
                        offsets: &offsets,
                    },
                    Right::Runs {
                        data: &b,
                        offsets: &offsets,
                        run,
                        run_offsets: &run_offsets,
                    },
                ];
                let lefts = [Left::Packed(&ap), Left::RowMajor { data: &a, ld: k }];
                let ep = Epilogue {
                    row_bias: Some(&bias),
                    col_bias: None,
                    addend: Some(&addend),
                    clamp: Clamp {
                        lo: 0.0,
                        hi: 6.0,
                        relu: true,
                    },
                };
                for right in rights {
                    for left in lefts {
                        for (acc, ep) in [(false, ep), (true, Epilogue::NONE)] {
                            let go = |workers: usize| {
                                let mut c = c0.clone();
                                kern.gemm_split(
                                    m, n, k, left, right, &mut c, ldc, acc, ep, workers,
                                )
                                .unwrap();
                                c
                            };
                            let whole = go(1);
                            for w in [2, 3] {
                                let cut = go(w);
                                let same = whole
                                    .iter()
                                    .zip(&cut)
                                    .all(|(x, y)| x.to_bits() == y.to_bits());
                                assert!(same, "{m}×{n}×{k} on {w}: {right:?} {left:?} {acc}");
                            }
                            // And the whole is the product: C's padding columns untouched.
                            for i in 0..m {
                                assert_eq!(
                                    whole[i * ldc + n..][..ldc - n],
                                    c0[i * ldc + n..][..ldc - n]
                                );
                            }
                        }
                    }
                }
            }
        }
    }
}

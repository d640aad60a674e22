//! The JIT: renders a program's elementwise and row kernels, and the elementwise epilogue of
//! each matmul kernel ([`crate::fusion::matmul_epilogue`]: bias, activation, residual over
//! the product faer computes), to C ([`crate::codegen::c`]),
//! compiles them with the system C compiler into one shared object, loads it with
//! `libloading`, and caches the object by a SHA-256 of the source, the compiler's identity
//! and the flags. The executor ([`crate::exec::execute_with`]) runs compiled kernels in
//! parallel over blocks of rows on the current rayon pool (its thread count is the one
//! `--threads` sets) and every other kernel in the interpreter.
//!
//! Flags: `-O3 -march=native -fPIC -shared -std=c11 -fno-math-errno -fno-trapping-math
//! -ffp-contract=off -Werror=implicit-function-declaration` (with GCC, `-O3` is [`GCC_OPT`]:
//! `-O2` plus the vectorizer and three loop passes), no `-ffast-math`: NaN and ±inf semantics hold (no trap is ever
//! enabled, so assuming none lets the selects in the prelude vectorize), and there is no
//! FMA contraction the source did not ask for. The compiler is `$CC` or `cc`. The cache folder is `$TENSORFORGE_CACHE_DIR`, else
//! `$XDG_CACHE_HOME/tensorforge/jit`, else `~/.cache/tensorforge/jit`; an entry is written
//! under a temporary name and renamed, and a loaded entry must return its own key from
//! `tf_key()`, so a corrupt or foreign file is rebuilt, never run. A folder that cannot be
//! written falls back to a fresh temporary folder (said in [`Jit::notes`]).
//! Left out: the matrix products themselves (faer) and opaque kernels (interpreted), Windows;
//! a cross compiler needs `TENSORFORGE_JIT_MARCH` ([`cflags`]).

use crate::codegen::c::{render_program_with, CKernel, CProgram};
use crate::fusion::Program;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use std::time::Instant;
use thiserror::Error;

/// Bumped when the calling convention of generated kernels changes (part of the cache key).
pub const JIT_ABI_VERSION: u32 = 1;

/// Compiler flags (part of the cache key). On x86-64, `-mprefer-vector-width=512` lets an
/// AVX-512 CPU use its full vector width (ignored elsewhere within x86).
pub const CFLAGS: &[&str] = &[
    "-O3",
    "-march=native",
    "-fPIC",
    "-shared",
    "-std=c11",
    "-fno-math-errno",
    "-fno-trapping-math",
    "-ffp-contract=off",
    // A call to a function the prelude lacks must fail the build, not the load.
    "-Werror=implicit-function-declaration",
    #[cfg(target_arch = "x86_64")]
    "-mprefer-vector-width=512",
];

/// What replaces `-O3` when the compiler is GCC: `-O2` with the loop vectorizer at the dynamic
/// cost model and the three `-O3` loop passes the generated kernels need (peeling the short
/// lane loops of the row helpers, unswitching and splitting loops on a row's conditions);
/// the prelude's helpers are `always_inline`, so a helper called in a loop is inlined and
/// the loop vectorizes as at `-O3`. `-O3`'s other passes (loop distribution, interchange,
/// unroll-and-jam, predictive commoning, cloning for constants) sped no kernel: the JIT
/// kernels of BERT, GPT-2, Llama, ViT and EfficientNet ran as fast (sums within ±1.5 %),
/// and a JIT build took 6–9 % less CPU (docs/performance.md, "JIT compile time", AMD EPYC
/// Zen 5, AVX-512 and the AVX2 cap).
pub const GCC_OPT: &[&str] = &[
    "-O2",
    "-ftree-vectorize",
    "-fvect-cost-model=dynamic",
    "-fpeel-loops",
    "-funswitch-loops",
    "-fsplit-loops",
];

/// Whether the C compiler resolves to GCC (its file name holds `gcc`, as `cc` does on Debian
/// and Ubuntu: `x86_64-linux-gnu-gcc-12`); any other compiler keeps `-O3`.
fn compiler_is_gcc() -> bool {
    compiler_id().is_ok_and(|id| {
        let path = id.rsplitn(3, ' ').nth(2).unwrap_or_default();
        Path::new(path)
            .file_name()
            .is_some_and(|n| n.to_string_lossy().contains("gcc"))
    })
}

/// [`CFLAGS`] plus what the SIMD level asks for: when `TENSORFORGE_SIMD` caps an AVX-512
/// CPU at AVX2 ([`tensorforge_kernels::vmath::level`]), the generated code is built without
/// AVX-512 too (`-mno-avx512f`), so an AVX2-only machine's speed can be measured on this one.
///
/// `TENSORFORGE_JIT_MARCH` replaces `-march=native` (`-march=VALUE`): a cross compiler, such
/// as the aarch64 one `tools/aarch64_qemu.sh` runs the tests with, has no native CPU to ask.
///
/// With GCC, `-O3` becomes [`GCC_OPT`]: kernels as fast, for somewhat less compile time.
pub fn cflags() -> Vec<String> {
    let mut f: Vec<String> = CFLAGS.iter().map(|s| s.to_string()).collect();
    if compiler_is_gcc() {
        if let Some(i) = f.iter().position(|x| x == "-O3") {
            f.splice(i..=i, GCC_OPT.iter().map(|s| s.to_string()));
        }
    }
    if let Some(m) = std::env::var("TENSORFORGE_JIT_MARCH")
        .ok()
        .filter(|m| !m.trim().is_empty())
    {
        for x in f.iter_mut().filter(|x| *x == "-march=native") {
            *x = format!("-march={}", m.trim());
        }
    }
    #[cfg(target_arch = "x86_64")]
    {
        use tensorforge_kernels::vmath::{level, Level};
        if std::arch::is_x86_feature_detected!("avx512f") && level() != Level::Avx512 {
            f.retain(|x| x != "-mprefer-vector-width=512");
            f.push("-mno-avx512f".into());
        }
    }
    f
}

/// Why the JIT could not produce compiled code.
#[derive(Debug, Error)]
pub enum JitError {
    /// No working C compiler.
    #[error("no C compiler: `{compiler}`: {detail}; set CC or install cc")]
    NoCompiler {
        /// The compiler command tried.
        compiler: String,
        /// What failed.
        detail: String,
    },
    /// The compiler rejected the generated source (a bug: the source is kept).
    #[error("the C compiler failed on {source_path}: {stderr}")]
    Compile {
        /// The generated file, kept for inspection.
        source_path: String,
        /// The compiler's error output (first lines).
        stderr: String,
    },
    /// Reading or writing the cache.
    #[error("JIT cache `{path}`: {detail}")]
    Io {
        /// The file or folder.
        path: String,
        /// What failed.
        detail: String,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// Loading the compiled object.
    #[error("cannot load `{path}`: {source}")]
    Load {
        /// The shared object.
        path: String,
        /// The loader's error.
        #[source]
        source: libloading::Error,
    },
}

type KernelFn = unsafe extern "C" fn(*const *const f32, *const *mut f32, i64, i64, i64, *mut f32);

/// One compiled kernel.
pub(crate) struct JitKernel {
    pub(crate) f: KernelFn,
    pub(crate) meta: CKernel,
}

/// A program's compiled kernels.
pub struct Jit {
    /// Kept loaded for the function pointers' lifetime.
    _lib: Option<libloading::Library>,
    /// By kernel index: the compiled kernel, or `None` (interpreted).
    pub(crate) kernels: Vec<Option<JitKernel>>,
    /// `(kernel name, reason)` for kernels left to the interpreter.
    pub skipped: Vec<(String, String)>,
    /// Wall time of rendering, compiling (or loading from the cache) and loading, ms.
    pub build_ms: f64,
    /// True when the object came from the cache.
    pub cached: bool,
    /// The shared object's path.
    pub object: Option<PathBuf>,
    /// Things the user should know (cache fallback).
    pub notes: Vec<String>,
}

impl Jit {
    /// Number of kernels that run compiled code.
    pub fn compiled_count(&self) -> usize {
        self.kernels.iter().filter(|k| k.is_some()).count()
    }
}

fn compiler() -> String {
    std::env::var("CC")
        .ok()
        .filter(|c| !c.trim().is_empty())
        .unwrap_or_else(|| "cc".into())
}

/// The compiler's identity, once per process: its resolved path, size and modification
/// time (a compiler upgrade replaces the binary, so the cache key changes), without running
/// it (`cc --version` alone costs ~1.7 ms). A compiler that cannot be found is an error.
fn compiler_id() -> Result<String, JitError> {
    static ID: OnceLock<Result<String, String>> = OnceLock::new();
    let cc = compiler();
    ID.get_or_init(|| {
        let found = if cc.contains('/') {
            Some(PathBuf::from(&cc))
        } else {
            std::env::var_os("PATH").and_then(|paths| {
                std::env::split_paths(&paths)
                    .map(|d| d.join(&cc))
                    .find(|p| p.is_file())
            })
        };
        let path = found.ok_or_else(|| "not found on PATH".to_string())?;
        let real = path.canonicalize().map_err(|e| e.to_string())?;
        let meta = std::fs::metadata(&real).map_err(|e| e.to_string())?;
        let mtime = meta
            .modified()
            .ok()
            .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
            .map_or(0, |d| d.as_nanos());
        Ok(format!("{} {} {mtime}", real.display(), meta.len()))
    })
    .clone()
    .map_err(|detail| JitError::NoCompiler {
        compiler: cc,
        detail,
    })
}

/// Whether a C compiler is present (the JIT can run).
pub fn compiler_available() -> bool {
    compiler_id().is_ok()
}

/// The cache folder (see the module docs).
pub fn cache_dir() -> PathBuf {
    if let Some(d) = std::env::var_os("TENSORFORGE_CACHE_DIR").filter(|d| !d.is_empty()) {
        return PathBuf::from(d);
    }
    if let Some(d) = std::env::var_os("XDG_CACHE_HOME").filter(|d| !d.is_empty()) {
        return PathBuf::from(d).join("tensorforge/jit");
    }
    if let Some(h) = std::env::var_os("HOME").filter(|d| !d.is_empty()) {
        return PathBuf::from(h).join(".cache/tensorforge/jit");
    }
    std::env::temp_dir().join("tensorforge-jit")
}

/// Cache key: SHA-256 of the ABI version, compiler command and identity (resolved path,
/// size, modification time), flags, source.
pub fn cache_key(source: &str, compiler: &str, compiler_id: &str) -> String {
    let head = format!("tensorforge-jit-abi-{JIT_ABI_VERSION}\0{compiler}\0{compiler_id}\0");
    tensorforge_core::digest::sha256_hex(&[
        head.as_bytes(),
        cflags().join(" ").as_bytes(),
        &[0u8],
        source.as_bytes(),
    ])
}

fn io(path: &Path, detail: &str) -> impl FnOnce(std::io::Error) -> JitError {
    let path = path.display().to_string();
    let detail = detail.to_string();
    move |source| JitError::Io {
        path,
        detail,
        source,
    }
}

/// Load `so` and check that it is the object for `key`.
fn load(so: &Path, key: &str) -> Result<Option<libloading::Library>, JitError> {
    // SAFETY: the object was written by this module from generated C whose only
    // initialization is static data; `tf_key` is checked before any kernel is called.
    let lib = match unsafe { libloading::Library::new(so) } {
        Ok(l) => l,
        Err(_) => return Ok(None),
    };
    // SAFETY: `tf_key` has this signature in every object this module writes; a foreign
    // object without it fails the lookup.
    let ok = unsafe {
        match lib.get::<unsafe extern "C" fn() -> *const std::ffi::c_char>(b"tf_key\0") {
            Ok(f) => {
                let p = f();
                !p.is_null() && std::ffi::CStr::from_ptr(p).to_bytes() == key.as_bytes()
            }
            Err(_) => false,
        }
    };
    Ok(ok.then_some(lib))
}

fn build(dir: &Path, key: &str, source: &str) -> Result<PathBuf, JitError> {
    std::fs::create_dir_all(dir).map_err(io(dir, "cannot create the cache folder"))?;
    let tag = format!("{key}.{}", std::process::id());
    let c = dir.join(format!("{tag}.c"));
    let tmp = dir.join(format!("{tag}.so.tmp"));
    let so = dir.join(format!("{key}.so"));
    std::fs::write(&c, source).map_err(io(&c, "cannot write the generated source"))?;
    let out = Command::new(compiler())
        .args(cflags())
        .arg("-o")
        .arg(&tmp)
        .arg(&c)
        .arg("-lm")
        .output()
        .map_err(io(&c, "cannot run the C compiler"))?;
    if !out.status.success() {
        let _ = std::fs::remove_file(&tmp);
        let stderr: String = String::from_utf8_lossy(&out.stderr)
            .lines()
            .take(8)
            .collect::<Vec<_>>()
            .join(" | ");
        return Err(JitError::Compile {
            source_path: c.display().to_string(),
            stderr,
        });
    }
    let _ = std::fs::remove_file(&c);
    std::fs::rename(&tmp, &so).map_err(io(&so, "cannot move the compiled object into place"))?;
    Ok(so)
}

/// A loaded shared object built from some C source.
pub(crate) struct Object {
    pub(crate) lib: libloading::Library,
    pub(crate) path: PathBuf,
    pub(crate) cached: bool,
    pub(crate) notes: Vec<String>,
}

/// Compile `source` (plus a `tf_key` function returning its cache key) into a shared object,
/// or load it from the cache.
/// The object for kernel `bodies` (each a complete C function), compiled as up to
/// [`MAX_UNITS`] translation units in parallel (each with the prelude) and linked into one
/// shared object; cached like [`object_for`] under the key of the whole source.
fn object_for_units(bodies: &[String], cc: &str, id: &str) -> Result<Object, JitError> {
    let (whole, units) = (whole_source(bodies), split_units(bodies));
    if units.len() <= 1 {
        return object_for(whole, cc, id);
    }
    object_cached(whole, cc, id, |dir, key, source| {
        build_units(dir, key, source, &units)
    })
}

/// The whole source of kernel `bodies`: the prelude, then each body (what the cache key
/// covers).
fn whole_source(bodies: &[String]) -> String {
    let mut whole = String::from(crate::codegen::c::PRELUDE);
    for b in bodies {
        whole.push('\n');
        whole.push_str(b);
    }
    whole
}

/// The object for the whole source `whole` when the cache holds a valid one (never builds).
fn cached_object(key: &str) -> Result<Option<Object>, JitError> {
    let so = cache_dir().join(format!("{key}.so"));
    if !so.exists() {
        return Ok(None);
    }
    Ok(load(&so, key)?.map(|lib| Object {
        lib,
        path: so,
        cached: true,
        notes: vec![],
    }))
}

/// Where a failed background build of `key` leaves the compiler's messages.
fn failed_path(dir: &Path, key: &str) -> PathBuf {
    dir.join(format!("{key}.failed"))
}

/// `s` as one single-quoted POSIX shell word.
fn sh_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', "'\\''"))
}

/// Start building the object of cache key `key` (compiled as `units`, the key function in the
/// last one, as
/// [`build_units`] does) in a shell that outlives this process: the units compile in
/// parallel, the link writes a temporary name that is renamed to `<key>.so` (a failure
/// leaves the messages in `<key>.failed`), and the sources, objects and the script itself
/// are removed whatever happens. The shell is
/// started in the background of a shell that exits at once, so no child is left for this
/// process to reap. Returns the script's path once the build has started.
fn spawn_background_build(key: &str, units: &[String], cc: &str) -> Result<PathBuf, JitError> {
    let dir = cache_dir();
    std::fs::create_dir_all(&dir).map_err(io(&dir, "cannot create the cache folder"))?;
    let tag = format!("{key}.{}.bg", std::process::id());
    let sources = with_key_line(
        units,
        &format!("const char *tf_key(void) {{ return \"{key}\"; }}\n"),
    );
    let q = |p: &Path| sh_quote(&p.display().to_string());
    let flags: Vec<String> = cflags()
        .into_iter()
        .filter(|f| f != "-shared")
        .map(|f| sh_quote(&f))
        .collect();
    let (tmp, so, script) = (
        dir.join(format!("{tag}.so.tmp")),
        dir.join(format!("{key}.so")),
        dir.join(format!("{tag}.sh")),
    );
    let (err, failed, failed_tmp) = (
        dir.join(format!("{tag}.err")),
        failed_path(&dir, key),
        dir.join(format!("{tag}.failed.tmp")),
    );
    let mut sh = String::from("ok=1\n");
    let mut objects = vec![];
    let mut written: Vec<PathBuf> = vec![];
    let mut files = vec![q(&tmp), q(&err), q(&script)];
    for (i, src) in sources.iter().enumerate() {
        let (c, o) = (
            dir.join(format!("{tag}.{i}.c")),
            dir.join(format!("{tag}.{i}.o")),
        );
        if let Err(e) = std::fs::write(&c, src) {
            for w in &written {
                let _ = std::fs::remove_file(w);
            }
            return Err(io(&c, "cannot write the generated source")(e));
        }
        written.push(c.clone());
        sh.push_str(&format!(
            "{} {} -c -o {} {} 2>>{} & p{i}=$!\n",
            sh_quote(cc),
            flags.join(" "),
            q(&o),
            q(&c),
            q(&err)
        ));
        objects.push(q(&o));
        files.extend([q(&c), q(&o)]);
    }
    for i in 0..sources.len() {
        sh.push_str(&format!("wait $p{i} || ok=0\n"));
    }
    // Success renames the object into place; a failure leaves the compiler's messages in
    // `<key>.failed`, which later runs report instead of compiling again.
    sh.push_str(&format!(
        "if [ $ok = 1 ] && {cc} -shared -fPIC -o {tmp} {objs} -lm 2>>{err}; then mv -f {tmp} {so}; \
         else head -c 4000 {err} >{ftmp} && mv -f {ftmp} {failed}; fi\nrm -f {files}\n",
        cc = sh_quote(cc),
        tmp = q(&tmp),
        objs = objects.join(" "),
        err = q(&err),
        so = q(&so),
        ftmp = q(&failed_tmp),
        failed = q(&failed),
        files = files.join(" ")
    ));
    if let Err(e) = std::fs::write(&script, sh) {
        for w in &written {
            let _ = std::fs::remove_file(w);
        }
        return Err(io(&script, "cannot write the build script")(e));
    }
    let status = Command::new("sh")
        .arg("-c")
        .arg(format!("sh {} </dev/null >/dev/null 2>&1 &", q(&script)))
        .status()
        .map_err(io(&script, "cannot start the background build"))?;
    if !status.success() {
        return Err(JitError::Compile {
            source_path: script.display().to_string(),
            stderr: format!("the shell that starts the build exited with {status}"),
        });
    }
    Ok(script)
}

/// Translation units at most (one per core, up to this many).
const MAX_UNITS: usize = 4;

/// Kernel bodies dealt into units of about equal source length, one per available core (up
/// to [`MAX_UNITS`]); a program of a few small kernels stays one unit.
fn split_units(bodies: &[String]) -> Vec<String> {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let total: usize = bodies.iter().map(|b| b.len()).sum();
    let n = cores
        .min(MAX_UNITS)
        .min(bodies.len())
        .min(total / 4096 + 1)
        .max(1);
    let mut units = vec![String::from(crate::codegen::c::PRELUDE); n];
    let mut sizes = vec![0usize; n];
    for b in bodies {
        let i = (0..n).min_by_key(|&i| sizes[i]).unwrap_or(0);
        units[i].push('\n');
        units[i].push_str(b);
        sizes[i] += b.len();
    }
    units
}

/// `units` with the key function's line appended to the last one (a unit of its own cost a
/// compiler process of its own, 70–80 ms of CPU beside the units on a two-core VM, for a
/// one-line function).
fn with_key_line(units: &[String], key_line: &str) -> Vec<String> {
    let mut sources: Vec<String> = units.to_vec();
    match sources.last_mut() {
        Some(last) => {
            last.push('\n');
            last.push_str(key_line);
        }
        None => sources.push(key_line.to_string()),
    }
    sources
}

/// Compile each unit to an object file at once (one compiler process per unit), then link
/// them and the key function into `<key>.so` (written under a temporary name and renamed).
fn build_units(dir: &Path, key: &str, keyed: &str, units: &[String]) -> Result<PathBuf, JitError> {
    std::fs::create_dir_all(dir).map_err(io(dir, "cannot create the cache folder"))?;
    let tag = format!("{key}.{}", std::process::id());
    // The key function (the last line of `keyed`) goes at the end of the last unit.
    let sources = with_key_line(units, keyed.lines().last().unwrap_or_default());
    let paths: Vec<(PathBuf, PathBuf)> = (0..sources.len())
        .map(|i| {
            (
                dir.join(format!("{tag}.{i}.c")),
                dir.join(format!("{tag}.{i}.o")),
            )
        })
        .collect();
    for ((c, _), src) in paths.iter().zip(&sources) {
        std::fs::write(c, src).map_err(io(c, "cannot write the generated source"))?;
    }
    let results: Vec<Result<(), JitError>> = std::thread::scope(|sc| {
        let hs: Vec<_> = paths
            .iter()
            .map(|(c, o)| {
                sc.spawn(move || {
                    let out = Command::new(compiler())
                        .args(cflags().into_iter().filter(|f| f != "-shared"))
                        .arg("-c")
                        .arg("-o")
                        .arg(o)
                        .arg(c)
                        .output()
                        .map_err(io(c, "cannot run the C compiler"))?;
                    compile_result(c, &out)
                })
            })
            .collect();
        hs.into_iter()
            .map(|h| {
                h.join().unwrap_or_else(|_| {
                    Err(JitError::Compile {
                        source_path: dir.display().to_string(),
                        stderr: "a compiler thread panicked".into(),
                    })
                })
            })
            .collect()
    });
    let cleanup = |paths: &[(PathBuf, PathBuf)]| {
        for (c, o) in paths {
            let _ = std::fs::remove_file(c);
            let _ = std::fs::remove_file(o);
        }
    };
    if let Some(e) = results.into_iter().find_map(|r| r.err()) {
        for (_, o) in &paths {
            let _ = std::fs::remove_file(o);
        }
        return Err(e);
    }
    let tmp = dir.join(format!("{tag}.so.tmp"));
    let so = dir.join(format!("{key}.so"));
    let out = Command::new(compiler())
        .args(["-shared", "-fPIC", "-o"])
        .arg(&tmp)
        .args(paths.iter().map(|(_, o)| o))
        .arg("-lm")
        .output()
        .map_err(io(&tmp, "cannot run the linker"))?;
    let linked = compile_result(&tmp, &out);
    cleanup(&paths);
    linked?;
    std::fs::rename(&tmp, &so).map_err(io(&so, "cannot move the compiled object into place"))?;
    Ok(so)
}

/// `Ok` when the compiler succeeded, else its first lines of stderr.
fn compile_result(c: &Path, out: &std::process::Output) -> Result<(), JitError> {
    if out.status.success() {
        return Ok(());
    }
    let stderr: String = String::from_utf8_lossy(&out.stderr)
        .lines()
        .take(8)
        .collect::<Vec<_>>()
        .join(" | ");
    Err(JitError::Compile {
        source_path: c.display().to_string(),
        stderr,
    })
}

pub(crate) fn object_for(source: String, cc: &str, id: &str) -> Result<Object, JitError> {
    object_cached(source, cc, id, build)
}

/// The cached object for `source` (keyed with `cc`, `id` and the flags), built by `make`
/// from (folder, key, keyed source) when absent or corrupt.
fn object_cached(
    mut source: String,
    cc: &str,
    id: &str,
    make: impl Fn(&Path, &str, &str) -> Result<PathBuf, JitError>,
) -> Result<Object, JitError> {
    let t0 = Instant::now();
    // The key covers the source without the key line itself.
    let key = cache_key(&source, cc, id);
    source.push_str(&format!(
        "\nconst char *tf_key(void) {{ return \"{key}\"; }}\n"
    ));
    let mut notes = vec![];
    let mut dir = cache_dir();
    let mut so = dir.join(format!("{key}.so"));
    let mut cached = false;
    let mut lib = if so.exists() { load(&so, &key)? } else { None };
    if lib.is_some() {
        cached = true;
    } else {
        if so.exists() {
            notes.push(format!(
                "JIT cache entry `{}` was corrupt or foreign; rebuilt",
                so.display()
            ));
            let _ = std::fs::remove_file(&so);
        }
        so = match make(&dir, &key, &source) {
            Ok(so) => so,
            Err(JitError::Io { path, detail, .. }) => {
                let tmp = std::env::temp_dir().join(format!(
                    "tensorforge-jit-{}-{}",
                    std::process::id(),
                    t0.elapsed().as_nanos()
                ));
                notes.push(format!(
                    "JIT cache `{path}` is not usable ({detail}); compiled into `{}` instead",
                    tmp.display()
                ));
                dir = tmp;
                make(&dir, &key, &source)?
            }
            Err(e) => return Err(e),
        };
        lib = load(&so, &key)?;
    }
    let lib = lib.ok_or_else(|| JitError::Load {
        path: so.display().to_string(),
        source: libloading::Error::DlOpenUnknown,
    })?;
    Ok(Object {
        lib,
        path: so,
        cached,
        notes,
    })
}

/// Compile (or load from the cache) every kernel of `p` that has a C form.
pub fn compile(p: &Program) -> Result<Jit, JitError> {
    compile_tiered(p, false)?.ok_or_else(|| JitError::Compile {
        source_path: cache_dir().display().to_string(),
        stderr: "the build produced no object".into(),
    })
}

/// The compiled kernels of `p` when the JIT cache already holds them. Otherwise the build
/// starts in a background process that outlives this one (the cache is filled for the next
/// process) and this returns `None`: run the interpreter meanwhile. What a one-shot run
/// wants: compiling a transformer block takes 0.1–0.2 s, running it interpreted well under
/// a millisecond.
///
/// ```no_run
/// # let p = tensorforge_graph::fusion::compile(&tensorforge_graph::Graph::from_json_str(
/// #     r#"{"nodes":[{"name":"x","op":"Input","attrs":{"shape":[4],"dtype":"fp32"}},
/// #     {"name":"y","op":"Exp","inputs":["x"]}]}"#).unwrap()).unwrap().fused;
/// match tensorforge_graph::jit::compile_or_start(&p).unwrap() {
///     Some(jit) => println!("{} kernels compiled", jit.compiled_count()),
///     None => println!("compiling in the background; interpreting this run"),
/// }
/// ```
pub fn compile_or_start(p: &Program) -> Result<Option<Jit>, JitError> {
    compile_tiered(p, true)
}

/// [`compile`], or with `background` [`compile_or_start`].
fn compile_tiered(p: &Program, background: bool) -> Result<Option<Jit>, JitError> {
    let t0 = Instant::now();
    let cc = compiler();
    let id = compiler_id()?;
    let cp: CProgram = render_program_with(p, true);
    let skipped = cp
        .skipped
        .iter()
        .map(|(i, why)| (p.kernels[*i].name.clone(), why.clone()))
        .collect();
    if cp.kernels.is_empty() {
        return Ok(Some(Jit {
            _lib: None,
            kernels: p.kernels.iter().map(|_| None).collect(),
            skipped,
            build_ms: t0.elapsed().as_secs_f64() * 1e3,
            cached: true,
            object: None,
            notes: vec![],
        }));
    }
    // Identical kernels (a model's repeated layers) are compiled once: each body is keyed
    // with its own symbol blanked out, and a repeat calls the first one's symbol.
    let mut first: std::collections::HashMap<String, String> = Default::default();
    let mut bodies: Vec<String> = vec![];
    let mut symbol_of: Vec<String> = Vec::with_capacity(cp.kernels.len());
    for ck in &cp.kernels {
        // The key: the body without its comment lines (they name the kernel's nodes) and
        // with its own symbol blanked.
        let blank: String = ck
            .source
            .lines()
            .filter(|l| !l.trim_start().starts_with("/*"))
            .collect::<Vec<_>>()
            .join("\n")
            .replace(&format!("{}(", ck.symbol), "TF_SYM(");
        let sym = first.entry(blank).or_insert_with(|| {
            bodies.push(ck.source.clone());
            ck.symbol.clone()
        });
        symbol_of.push(sym.clone());
    }
    let obj = if background {
        // The key once; the units only when there is something to build.
        let key = cache_key(&whole_source(&bodies), &cc, &id);
        match cached_object(&key)? {
            Some(o) => o,
            None => {
                // An earlier background build of this source failed: say so, do not retry
                // (a waiting build, `--executor jit`, compiles again and shows the error).
                let failed = failed_path(&cache_dir(), &key);
                if let Ok(msg) = std::fs::read_to_string(&failed) {
                    let mut stderr = msg.lines().take(8).collect::<Vec<_>>().join(" | ");
                    stderr.push_str(
                        " (an earlier background build; `--executor jit` compiles again, and removing the file retries in the background)",
                    );
                    return Err(JitError::Compile {
                        source_path: failed.display().to_string(),
                        stderr,
                    });
                }
                spawn_background_build(&key, &split_units(&bodies), &cc)?;
                return Ok(None);
            }
        }
    } else {
        object_for_units(&bodies, &cc, &id)?
    };
    let (lib, so, cached, notes) = (obj.lib, obj.path, obj.cached, obj.notes);
    let mut kernels: Vec<Option<JitKernel>> = p.kernels.iter().map(|_| None).collect();
    for (ck, symbol) in cp.kernels.into_iter().zip(symbol_of) {
        let sym = format!("{symbol}\0");
        // SAFETY: every rendered kernel is defined in this object with the `KernelFn`
        // signature (see codegen::c).
        let f: KernelFn = unsafe {
            *lib.get::<KernelFn>(sym.as_bytes())
                .map_err(|source| JitError::Load {
                    path: so.display().to_string(),
                    source,
                })?
        };
        let i = ck.kernel;
        kernels[i] = Some(JitKernel { f, meta: ck });
    }
    Ok(Some(Jit {
        _lib: Some(lib),
        kernels,
        skipped,
        build_ms: t0.elapsed().as_secs_f64() * 1e3,
        cached,
        object: Some(so),
        notes,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codegen::c::PRELUDE;

    type F1 = unsafe extern "C" fn(*const f32, *mut f32, i64);
    type F2 = unsafe extern "C" fn(*const f32, *const f32, *mut f32, i64);

    /// f32 spacing at the magnitude of `r` (2^-149 below the normal range).
    fn ulp(r: f64) -> f64 {
        let a = r.abs().max(f32::MIN_POSITIVE as f64);
        2f64.powi(a.log2().floor() as i32 - 23)
    }

    fn ulps(y: f32, r: f64) -> f64 {
        if r.is_nan() {
            return if y.is_nan() { 0.0 } else { f64::INFINITY };
        }
        if r.is_infinite() || (r.abs() > f32::MAX as f64) {
            return if y as f64 == r || (y.is_infinite() && y.signum() as f64 == r.signum()) {
                0.0
            } else {
                f64::INFINITY
            };
        }
        ((y as f64) - r).abs() / ulp(r)
    }

    /// Every 1021st f32 bit pattern (both signs), and the special values.
    fn samples() -> Vec<f32> {
        let mut v: Vec<f32> = (0..u32::MAX / 1021)
            .map(|i| f32::from_bits(i.wrapping_mul(1021)))
            .collect();
        v.extend([
            0.0,
            -0.0,
            f32::INFINITY,
            f32::NEG_INFINITY,
            f32::NAN,
            1.0,
            -1.0,
            f32::MIN_POSITIVE,
            1e-45,
            88.72283,
            88.72284,
            -103.97207,
            -103.97209,
            -87.33655,
        ]);
        v
    }

    /// The prelude's functions over arrays, compiled the way kernels are.
    fn helpers() -> Object {
        let src = format!(
            "{PRELUDE}
void t_exp(const float *restrict x, float *restrict y, int64_t n) {{ for (int64_t i = 0; i < n; ++i) y[i] = tf_exp(x[i]); }}
void t_expn(const float *restrict x, float *restrict y, int64_t n) {{ for (int64_t i = 0; i < n; ++i) y[i] = tf_exp_nonpos(x[i]); }}
void t_erf(const float *restrict x, float *restrict y, int64_t n) {{ for (int64_t i = 0; i < n; ++i) y[i] = tf_erf(x[i]); }}
void t_gelu(const float *restrict x, float *restrict y, int64_t n) {{ for (int64_t i = 0; i < n; ++i) y[i] = tf_gelu_erf(x[i]); }}
void t_log(const float *restrict x, float *restrict y, int64_t n) {{ for (int64_t i = 0; i < n; ++i) y[i] = tf_log(x[i]); }}
void t_log1p(const float *restrict x, float *restrict y, int64_t n) {{ for (int64_t i = 0; i < n; ++i) y[i] = tf_log1p(x[i]); }}
void t_lae(const float *restrict a, const float *restrict b, float *restrict y, int64_t n) {{ for (int64_t i = 0; i < n; ++i) y[i] = tf_logaddexp(a[i], b[i]); }}
"
        );
        object_for(src, &compiler(), &compiler_id().unwrap()).unwrap()
    }

    /// Every prelude helper a kernel calls, compiled the way the JIT compiles it but for a
    /// named x86-64 level, must come out as vector code: a loop GCC or Clang leaves scalar
    /// uses only xmm registers, so each function's assembly must name ymm (AVX2) or zmm
    /// (AVX-512) registers. (tf_logaddexp stayed scalar at AVX2 while it converted double to
    /// int64, which AVX2 lacks as a vector instruction: 9.3 ns per element against 3.0.)
    #[cfg(target_arch = "x86_64")]
    #[test]
    fn prelude_helpers_vectorize_at_avx2_and_avx512() {
        let loops = [
            ("exp", "tf_exp(a[i])"),
            ("exp_nonpos", "tf_exp_nonpos(-a[i] * a[i])"),
            ("log", "tf_log(a[i])"),
            ("log1p", "tf_log1p(a[i])"),
            ("logaddexp", "tf_logaddexp(a[i], b[i])"),
            ("sigmoid", "tf_sigmoid(a[i])"),
            ("tanh", "tf_tanh(a[i])"),
            ("erf", "tf_erf(a[i])"),
            ("gelu_erf", "tf_gelu_erf(a[i])"),
            ("fmax", "tf_fmax(a[i], b[i])"),
            ("bf16", "tf_bf16(a[i])"),
            ("f16", "tf_f16(a[i])"),
            ("quant", "tf_quant(a[i], 0.5f, 3.0f)"),
        ];
        let rows = [
            (
                "row_max",
                "int nan; float m = tf_row_max(a, n, &nan); return nan ? 0.0f : m;",
            ),
            ("row_sum", "return (float)tf_row_sum(a, n);"),
            ("row_sumsq", "return (float)tf_row_sumsq(a, n);"),
            (
                "row_sumsq_dev",
                "return (float)tf_row_sumsq_dev(a, n, 0.5);",
            ),
            (
                "row_exp_shift",
                "return (float)tf_row_exp_shift(a, 0.5f, y, n, a + 16, (const float *)0, y + 16);",
            ),
            (
                "rmsnorm_row_next",
                "return (float)tf_rmsnorm_row_next(a, 0.5f, a, y, a + 1, n);",
            ),
            (
                "layernorm_row_next",
                "return (float)tf_layernorm_row_next(a, 0.1f, 0.5f, a, a, y, a + 1, n);",
            ),
        ];
        let mut src = String::from(PRELUDE);
        for (name, e) in loops {
            src.push_str(&format!(
                "void t_{name}(const float *restrict a, const float *restrict b, float *restrict y, int64_t n) {{ for (int64_t i = 0; i < n; ++i) y[i] = {e}; }}\n"
            ));
        }
        for (name, body) in rows {
            src.push_str(&format!(
                "float t_{name}(const float *restrict a, float *restrict y, int64_t n) {{ {body} }}\n"
            ));
        }
        let dir = std::env::temp_dir().join(format!("tf_vec_{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let c = dir.join("v.c");
        std::fs::write(&c, &src).unwrap();
        for (march, reg) in [("haswell", "%ymm"), ("skylake-avx512", "%zmm")] {
            let mut args: Vec<String> = cflags()
                .into_iter()
                .filter(|f| {
                    !matches!(f.as_str(), "-shared" | "-fPIC" | "-mno-avx512f")
                        && !f.starts_with("-march=")
                })
                .collect();
            args.extend([
                format!("-march={march}"),
                "-S".into(),
                "-o".into(),
                "-".into(),
            ]);
            let out = std::process::Command::new(compiler())
                .args(&args)
                .arg(&c)
                .output()
                .unwrap();
            assert!(
                out.status.success(),
                "{}",
                String::from_utf8_lossy(&out.stderr)
            );
            let asm = String::from_utf8_lossy(&out.stdout);
            // A function's assembly: from its label to the end of its procedure.
            let body = |label: &str| -> Option<&str> {
                let start = asm.find(&format!("\n{label}:"))?;
                let b = &asm[start..];
                Some(&b[..b.find(".cfi_endproc").unwrap_or(b.len())])
            };
            for name in loops.iter().map(|l| l.0).chain(rows.iter().map(|r| r.0)) {
                let own = body(&format!("t_{name}")).unwrap_or_else(|| panic!("{name}: no label"));
                // A helper the compiler kept out of line is checked where it lives.
                let callees: String = own
                    .lines()
                    .filter_map(|l| l.trim().strip_prefix("call"))
                    .filter_map(|c| body(c.trim().trim_end_matches("@PLT")))
                    .collect();
                assert!(
                    own.contains(reg) || callees.contains(reg),
                    "tf_{name} is scalar at -march={march} (no {reg} register)"
                );
            }
        }
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// erf(x) = 2/√π · e^(−x²) · Σₙ 2ⁿ x^(2n+1) / (1·3·…·(2n+1)): every term positive, so the
    /// sum is accurate to a few f64 ulp at any |x| (about 2x² + 40 terms).
    fn erf_series(x: f64) -> f64 {
        let (mut term, mut sum, mut n) = (x.abs(), x.abs(), 0.0);
        while term > 1e-18 * sum {
            n += 1.0;
            term *= 2.0 * x * x / (2.0 * n + 1.0);
            sum += term;
        }
        (2.0 / std::f64::consts::PI.sqrt() * (-x * x).exp() * sum).copysign(x)
    }

    fn max_ulps(name: &str, f: F1, xs: &[f32], reference: fn(f64) -> f64) -> f64 {
        let mut y = vec![0f32; xs.len()];
        // SAFETY: `f` reads and writes `xs.len()` floats of these buffers.
        unsafe { f(xs.as_ptr(), y.as_mut_ptr(), xs.len() as i64) };
        let mut worst = (0.0, 0.0f32);
        for (&x, &v) in xs.iter().zip(&y) {
            let e = ulps(v, reference(x as f64));
            if e > worst.0 {
                worst = (e, x);
            }
        }
        eprintln!("{name}: max {:.2} ulp (at x = {:e})", worst.0, worst.1);
        worst.0
    }

    /// The row helpers that stream the next row while they write this one: a norm's
    /// statistic of the next row must be exactly what the plain statistic gives (the same
    /// lanes, order and tail), its output row exactly the plain loop's, and the softmax
    /// exponential's blocked float sum within its stated bound of the exact sum of the values
    /// it stored, which must be tf_exp_nonpos's bit for bit. Lengths cover the short-row
    /// path, one lane group, block edges (256) and a tail.
    #[test]
    fn streaming_row_helpers_match_the_plain_ones() {
        let src = format!(
            "{PRELUDE}
double t_sumsq(const float *x, int64_t n) {{ return tf_row_sumsq(x, n); }}
double t_sum(const float *x, int64_t n) {{ return tf_row_sum(x, n); }}
double t_rms_next(const float *x, float inv, const float *g, float *y, const float *xn, int64_t n) {{ return tf_rmsnorm_row_next(x, inv, g, y, xn, n); }}
double t_ln_next(const float *x, float mean, float inv, const float *g, const float *b, float *y, const float *xn, int64_t n) {{ return tf_layernorm_row_next(x, mean, inv, g, b, y, xn, n); }}
double t_exp_shift(const float *x, float m, float *y, int64_t n, float *w) {{ return tf_row_exp_shift_in(x, m, y, n, x, (const float *)0, w); }}
double t_exp_shift_w(const float *x, float m, float *y, int64_t n, float *w) {{ return tf_row_exp_shift(x, m, y, n, x, (const float *)0, w); }}
void t_expn(const float *restrict x, float *restrict y, int64_t n) {{ for (int64_t i = 0; i < n; ++i) y[i] = tf_exp_nonpos(x[i]); }}
float t_max(const float *x, int64_t n, int *nan) {{ return tf_row_max_in(x, n, nan); }}
float t_max_w(const float *x, int64_t n, int *nan) {{ return tf_row_max(x, n, nan); }}
"
        );
        let o = object_for(src, &compiler(), &compiler_id().unwrap()).unwrap();
        type Stat = unsafe extern "C" fn(*const f32, i64) -> f64;
        type Rms =
            unsafe extern "C" fn(*const f32, f32, *const f32, *mut f32, *const f32, i64) -> f64;
        type Ln = unsafe extern "C" fn(
            *const f32,
            f32,
            f32,
            *const f32,
            *const f32,
            *mut f32,
            *const f32,
            i64,
        ) -> f64;
        type ExpShift = unsafe extern "C" fn(*const f32, f32, *mut f32, i64, *mut f32) -> f64;
        type Max = unsafe extern "C" fn(*const f32, i64, *mut i32) -> f32;
        // SAFETY: these symbols are defined above with these signatures.
        let (sumsq, sum, rms, ln, es, en, mx, es_w, mx_w) = unsafe {
            (
                *o.lib.get::<Stat>(b"t_sumsq\0").unwrap(),
                *o.lib.get::<Stat>(b"t_sum\0").unwrap(),
                *o.lib.get::<Rms>(b"t_rms_next\0").unwrap(),
                *o.lib.get::<Ln>(b"t_ln_next\0").unwrap(),
                *o.lib.get::<ExpShift>(b"t_exp_shift\0").unwrap(),
                *o.lib.get::<F1>(b"t_expn\0").unwrap(),
                *o.lib.get::<Max>(b"t_max\0").unwrap(),
                *o.lib.get::<ExpShift>(b"t_exp_shift_w\0").unwrap(),
                *o.lib.get::<Max>(b"t_max_w\0").unwrap(),
            )
        };
        use tensorforge_core::rng::SplitMix64;
        for (i, n) in [
            1usize, 5, 7, 8, 9, 15, 16, 17, 128, 197, 255, 256, 257, 1000, 1024, 4099,
        ]
        .into_iter()
        .enumerate()
        {
            let s = 10 * i as u64;
            let x = SplitMix64::f32_pm1_vec(s, n);
            let xn: Vec<f32> = SplitMix64::f32_pm1_vec(s + 1, n)
                .iter()
                .map(|v| 3.0 * v)
                .collect();
            let g = SplitMix64::f32_pm1_vec(s + 2, n);
            let b = SplitMix64::f32_pm1_vec(s + 3, n);
            let (inv, mean) = (1.25f32, 0.125f32);
            let mut y = vec![0f32; n];
            let ni = n as i64;
            // SAFETY: every pointer covers n floats; y is not aliased.
            unsafe {
                let next = rms(x.as_ptr(), inv, g.as_ptr(), y.as_mut_ptr(), xn.as_ptr(), ni);
                assert_eq!(next.to_bits(), sumsq(xn.as_ptr(), ni).to_bits(), "n = {n}");
                for c in 0..n {
                    assert_eq!(y[c].to_bits(), (x[c] * inv * g[c]).to_bits(), "n = {n}");
                }
                let next = ln(
                    x.as_ptr(),
                    mean,
                    inv,
                    g.as_ptr(),
                    b.as_ptr(),
                    y.as_mut_ptr(),
                    xn.as_ptr(),
                    ni,
                );
                assert_eq!(next.to_bits(), sum(xn.as_ptr(), ni).to_bits(), "n = {n}");
                for c in 0..n {
                    let want = (x[c] - mean) * inv * g[c] + b[c];
                    assert_eq!(y[c].to_bits(), want.to_bits(), "n = {n}");
                }
                // Softmax's exponential of x − m with m the row's maximum.
                let m = xn.iter().copied().fold(f32::NEG_INFINITY, f32::max);
                let mut w = vec![0f32; n];
                let total = es(xn.as_ptr(), m, y.as_mut_ptr(), ni, w.as_mut_ptr());
                let shifted: Vec<f32> = xn.iter().map(|v| v - m).collect();
                let mut want = vec![0f32; n];
                en(shifted.as_ptr(), want.as_mut_ptr(), ni);
                assert_eq!(
                    y.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
                    want.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
                    "n = {n}"
                );
                let exact: f64 = y.iter().map(|&v| v as f64).sum();
                // Each float lane adds at most 256 / 8 = 32 values (TF_EXP_LANES = 8 below
                // 512 bits; 16 values at 16 lanes), 31 roundings of at most 2^-24 of the
                // running sum: |error| <= 31 · 2^-24 · exact ≈ 1.85e-6 · exact.
                assert!(
                    (total - exact).abs() <= 31.0 * 2f64.powi(-24) * exact,
                    "n = {n}: {total} against {exact}"
                );
                // In place (y = x): the same values and the same sum. The tail vector
                // overlaps values the loop has already overwritten, so it must have read
                // them first.
                let mut inplace = xn.clone();
                let p = inplace.as_mut_ptr();
                let total_in = es(p, m, p, ni, w.as_mut_ptr());
                assert_eq!(total_in.to_bits(), total.to_bits(), "in place, n = {n}");
                assert_eq!(
                    inplace.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
                    want.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
                    "in place, n = {n}"
                );
                // The row max and NaN flag, the tail's values included: the largest value
                // placed last (in the tail when there is one), then a NaN there.
                let mut row = x.clone();
                row[n - 1] = 7.5;
                let mut nan = 0i32;
                assert_eq!(mx(row.as_ptr(), ni, &mut nan), 7.5, "n = {n}");
                assert_eq!(nan, 0, "n = {n}");
                row[n - 1] = f32::NAN;
                mx(row.as_ptr(), ni, &mut nan);
                assert_eq!(nan, 1, "NaN last, n = {n}");
                // The scalar-tail variants (rows a kernel has just written): the same
                // values, and the max and flag.
                let mut yw = vec![0f32; n];
                let total_w = es_w(xn.as_ptr(), m, yw.as_mut_ptr(), ni, w.as_mut_ptr());
                assert!(
                    (total_w - exact).abs() <= 31.0 * 2f64.powi(-24) * exact,
                    "scalar tail, n = {n}: {total_w} against {exact}"
                );
                assert_eq!(
                    yw.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
                    want.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
                    "scalar tail, n = {n}"
                );
                row[n - 1] = 7.5;
                assert_eq!(mx_w(row.as_ptr(), ni, &mut nan), 7.5, "n = {n}");
                assert_eq!(nan, 0, "n = {n}");
            }
        }
    }

    /// tf_gelu_erf against x·Φ(x) = 0.5·x·erfc(−x/√2) in f64 (libm's erfc: relative error
    /// near 1e-16, far below an f32 ulp) over every 1021st bit pattern, by range of x where
    /// |y| > 1e-6, the absolute bound below, and the special values. tools/gelu_erf_fit.py
    /// predicts 2.4 ulp for x in (−1, 0), 1.6 in (0, 1), 1.1 above, 6.9 in (−3, −1] and 24
    /// below −3 (r = −ln Φ(−|x|) up to 15 there, held in f32 to 2^-24 relative, costs up to
    /// 8 ulp alone), with an exact exponential; tf_exp_nonpos's polynomial adds about one.
    #[test]
    fn exact_gelu_error_bounds_hold() {
        let o = helpers();
        // SAFETY: t_gelu is defined in helpers() as (const float *, float *, int64_t).
        let g = unsafe { *o.lib.get::<F1>(b"t_gelu\0").unwrap() };
        let mut xs = samples();
        xs.extend((-4000..=4000).map(|i| i as f32 / 500.0));
        let mut y = vec![0f32; xs.len()];
        // SAFETY: `g` reads and writes `xs.len()` floats.
        unsafe { g(xs.as_ptr(), y.as_mut_ptr(), xs.len() as i64) };
        let reference = |x: f64| 0.5 * x * libm::erfc(-x * std::f64::consts::FRAC_1_SQRT_2);
        // (lower end of x, ulp bound, worst seen)
        let mut ranges = [
            (-1.0, 3.5, 0.0f64),
            (-3.0, 8.0, 0.0),
            (f64::NEG_INFINITY, 32.0, 0.0),
        ];
        let mut abs_worst = 0.0f64;
        for (&x, &v) in xs.iter().zip(&y) {
            if !x.is_finite() {
                continue;
            }
            let want = reference(f64::from(x));
            if want.abs() <= 1e-6 {
                abs_worst = abs_worst.max((f64::from(v) - want).abs());
                continue;
            }
            let r = ranges.iter_mut().find(|r| f64::from(x) > r.0).unwrap();
            r.2 = r.2.max(ulps(v, want));
        }
        eprintln!("tf_gelu_erf: max ulp above −1 {:.2}, on (−3, −1] {:.2}, below −3 {:.2}; {abs_worst:.2e} absolute where |y| <= 1e-6", ranges[0].2, ranges[1].2, ranges[2].2);
        for (lo, bound, worst) in ranges {
            assert!(worst <= bound, "x > {lo}: {worst} ulp");
        }
        // −5.55·Φ(−5.55) = −7.93e-8: the held tail's largest value (the true one is smaller).
        assert!(abs_worst <= 8e-8, "{abs_worst:e}");
        let sp = [
            0.0f32,
            -0.0,
            f32::INFINITY,
            f32::NEG_INFINITY,
            f32::NAN,
            1e-30,
            -1e-30,
        ];
        let mut ys = [1f32; 7];
        // SAFETY: as above, over 7 floats.
        unsafe { g(sp.as_ptr(), ys.as_mut_ptr(), 7) };
        assert_eq!(ys[0].to_bits(), 0.0f32.to_bits());
        assert_eq!(ys[1].to_bits(), (-0.0f32).to_bits());
        assert_eq!(ys[2], f32::INFINITY);
        assert!(ys[3] <= 0.0 && ys[3] >= -8e-8, "{}", ys[3]);
        assert!(ys[4].is_nan());
        // gelu(x) = x/2 for tiny x.
        assert_eq!((ys[5], ys[6]), (5e-31, -5e-31));
    }

    #[test]
    fn polynomial_error_bounds_hold_over_every_binade() {
        let o = helpers();
        let xs = samples();
        // SAFETY: these symbols are defined above with these signatures.
        let (e, en, erf, l, l1, lae) = unsafe {
            (
                *o.lib.get::<F1>(b"t_exp\0").unwrap(),
                *o.lib.get::<F1>(b"t_expn\0").unwrap(),
                *o.lib.get::<F1>(b"t_erf\0").unwrap(),
                *o.lib.get::<F1>(b"t_log\0").unwrap(),
                *o.lib.get::<F1>(b"t_log1p\0").unwrap(),
                *o.lib.get::<F2>(b"t_lae\0").unwrap(),
            )
        };
        // Bounds measured over ~4.2 M inputs spanning every binade, subnormals and the
        // special values (docs/graph.md records the measured maxima).
        assert!(max_ulps("exp", e, &xs, f64::exp) <= 2.0);
        // The softmax / tanh exponential: every x ≤ 0 with a normal result (x ≥ ln FLT_MIN
        // = −87.336544…) within 2 ulp; below that 0 (the true value is a subnormal, at most
        // 1.2e-38), and −∞ gives 0.
        let nonpos: Vec<f32> = xs
            .iter()
            .copied()
            .filter(|x| (-87.336_54..=0.0).contains(x))
            .collect();
        assert!(nonpos.len() > 100_000);
        assert!(max_ulps("exp_nonpos", en, &nonpos, f64::exp) <= 2.0);
        // erf in float (GELU's): within 1.5 ulp of the series below over |x| ≤ 6, where
        // erf leaves 1.0f (erfc(3.92) is half an ulp of 1); ±1 beyond. tools/erf_fit.py
        // puts the fit at 1.03 ulp with an exact exponential; tf_exp_nonpos adds up to
        // about 0.2 (measured 1.03 here).
        let near: Vec<f32> = xs.iter().copied().filter(|x| x.abs() <= 6.0).collect();
        assert!(max_ulps("erf", erf, &near, erf_series) <= 1.5);
        let below: Vec<f32> = vec![-87.337, -88.0, -103.9, -1e30, f32::NEG_INFINITY];
        let mut y = vec![1f32; below.len()];
        // SAFETY: `en` reads and writes `below.len()` floats.
        unsafe { en(below.as_ptr(), y.as_mut_ptr(), below.len() as i64) };
        assert!(y.iter().all(|&v| v == 0.0), "{y:?}");
        assert!(max_ulps("log", l, &xs, f64::ln) <= 2.0);
        assert!(max_ulps("log1p", l1, &xs, f64::ln_1p) <= 3.0);
        // logaddexp on pairs: a from the samples in [−200, 200], b = a + δ over a grid of δ
        // (the cancellation band m ≈ −log1p(e^d) included), and the specials.
        let a: Vec<f32> = xs
            .iter()
            .copied()
            .filter(|x| x.is_nan() || x.is_infinite() || x.abs() <= 200.0)
            .collect();
        let mut pa = vec![];
        let mut pb = vec![];
        for (i, &x) in a.iter().enumerate() {
            let d = [0.0f32, 1e-7, -0.3, 0.69, -0.69, 2.0, -20.0, 100.0][i % 8];
            pa.push(x);
            pb.push(if x.is_finite() { x + d } else { -x });
        }
        for &(x, y) in &[
            (-0.346_573_6_f32, -0.346_573_6_f32),
            (-0.5, -1.1),
            (f32::NEG_INFINITY, f32::NEG_INFINITY),
            (f32::INFINITY, f32::INFINITY),
            (f32::INFINITY, f32::NEG_INFINITY),
            (f32::NAN, 1.0),
            (1.0, f32::NAN),
            (f32::NEG_INFINITY, 3.0),
        ] {
            pa.push(x);
            pb.push(y);
        }
        let mut y = vec![0f32; pa.len()];
        // SAFETY: reads and writes `pa.len()` floats of equal-length buffers.
        unsafe { lae(pa.as_ptr(), pb.as_ptr(), y.as_mut_ptr(), pa.len() as i64) };
        let mut worst = (0.0f64, 0.0f32, 0.0f32);
        for ((&x, &z), &v) in pa.iter().zip(&pb).zip(&y) {
            let (x64, z64) = (x as f64, z as f64);
            let r = if x.is_nan() || z.is_nan() {
                f64::NAN
            } else if x == z {
                x64 + std::f64::consts::LN_2
            } else {
                let (hi, lo) = if x64 > z64 { (x64, z64) } else { (z64, x64) };
                hi + (lo - hi).exp().ln_1p()
            };
            let e = ulps(v, r);
            if e > worst.0 {
                worst = (e, x, z);
            }
        }
        eprintln!(
            "logaddexp: max {:.2} ulp (at {:e}, {:e})",
            worst.0, worst.1, worst.2
        );
        assert!(worst.0 <= 4.0);
        // Special values, exactly.
        let one = |f: F1, x: f32| {
            let mut y = [0f32];
            // SAFETY: one float in, one out.
            unsafe { f([x].as_ptr(), y.as_mut_ptr(), 1) };
            y[0]
        };
        assert_eq!(one(e, f32::NEG_INFINITY), 0.0);
        assert_eq!(one(e, f32::INFINITY), f32::INFINITY);
        assert!(one(e, f32::NAN).is_nan());
        assert_eq!(one(l, 0.0), f32::NEG_INFINITY);
        assert_eq!(one(l, -0.0), f32::NEG_INFINITY);
        assert!(one(l, -1.0).is_nan());
        assert_eq!(one(l, f32::INFINITY), f32::INFINITY);
        assert_eq!(one(l1, -1.0), f32::NEG_INFINITY);
        assert_eq!(one(l1, f32::INFINITY), f32::INFINITY);
        assert!(one(l1, -2.0).is_nan());
        assert_eq!(one(l1, -0.0).to_bits(), (-0.0f32).to_bits());
    }

    /// Every function of the op table: its C expression, compiled as kernels are, agrees
    /// with its scalar reference (what the interpreter runs) on 65 k bit patterns and the
    /// special values; bool functions on 0/1. Exact for the IEEE-exact functions; within
    /// 8 ulp (or 1e-6 absolute near 0) for the transcendental ones, whose C versions are the
    /// prelude's polynomials or libm's.
    #[test]
    fn every_op_table_function_in_c_agrees_with_its_reference() {
        use crate::optable::{BinaryFn, DTypeRule, UnaryFn};
        let mut src = String::from(PRELUDE);
        for (i, f) in UnaryFn::ALL.iter().enumerate() {
            src.push_str(&format!(
                "void t_u{i}(const float *restrict x, float *restrict y, int64_t n) {{ for (int64_t i = 0; i < n; ++i) y[i] = {}; }}\n",
                f.c_expr("x[i]")
            ));
        }
        for (i, f) in BinaryFn::ALL.iter().enumerate() {
            src.push_str(&format!(
                "void t_b{i}(const float *restrict a, const float *restrict b, float *restrict y, int64_t n) {{ for (int64_t i = 0; i < n; ++i) y[i] = {}; }}\n",
                f.c_expr("a[i]", "b[i]")
            ));
        }
        let o = object_for(src, &compiler(), &compiler_id().unwrap()).unwrap();
        let mut xs: Vec<f32> = (0..u32::MAX / 65_521)
            .map(|i| f32::from_bits(i.wrapping_mul(65_521)))
            .collect();
        xs.extend([
            0.0,
            -0.0,
            1.0,
            -1.0,
            0.5,
            -2.5,
            3.0,
            f32::INFINITY,
            f32::NEG_INFINITY,
            f32::NAN,
        ]);
        xs.extend((-400..=400).map(|i| i as f32 / 50.0));
        // Signaling NaNs made quiet: neither Rust nor C promises what max/min do with one
        // (LLVM lowers the reference's max to aarch64's `fmaxnm`, which turns sNaN into NaN
        // where gcc's compare-and-select gives the number; tools/aarch64_qemu.sh found it).
        for x in xs.iter_mut().filter(|x| x.is_nan()) {
            *x = f32::from_bits(x.to_bits() | 0x0040_0000);
        }
        let bools: Vec<f32> = (0..xs.len()).map(|i| (i % 2) as f32).collect();
        let exact = |name: &str| {
            !matches!(
                name,
                "Exp"
                    | "Log"
                    | "Log1p"
                    | "Tanh"
                    | "Erf"
                    | "Sigmoid"
                    | "SiLU"
                    | "GELU"
                    | "GeluErf"
                    | "Sin"
                    | "Cos"
                    | "LogAddExp"
                    | "Rsqrt"
            )
        };
        let check = |name: &str, got: f32, want: f32, args: String| {
            let ok = (got.is_nan() && want.is_nan())
                || got == want
                || (!exact(name) && (ulps(got, want as f64) <= 8.0 || (got - want).abs() <= 1e-6));
            assert!(
                ok,
                "{name}({args}): C gives {got:e}, the reference {want:e}"
            );
        };
        for (i, f) in UnaryFn::ALL.iter().enumerate() {
            let ins = if f.dtype_rule() == DTypeRule::Logic {
                &bools
            } else {
                &xs
            };
            let mut y = vec![0f32; ins.len()];
            // SAFETY: t_u{i} is defined above as (const float *, float *, int64_t).
            unsafe {
                let func = *o.lib.get::<F1>(format!("t_u{i}\0").as_bytes()).unwrap();
                func(ins.as_ptr(), y.as_mut_ptr(), ins.len() as i64);
            }
            for (&x, &g) in ins.iter().zip(&y) {
                check(f.name(), g, f.eval(x), format!("{x:e}"));
            }
        }
        // Pairs: each sample against a shifted copy, and against itself (equal operands).
        let ys: Vec<f32> = xs.iter().cycle().skip(7).take(xs.len()).copied().collect();
        for (i, f) in BinaryFn::ALL.iter().enumerate() {
            let (a, b) = if f.dtype_rule() == DTypeRule::Logic {
                let c: Vec<f32> = (0..xs.len()).map(|i| ((i / 2) % 2) as f32).collect();
                (bools.clone(), c)
            } else {
                (xs.clone(), ys.clone())
            };
            for (a, b) in [(&a, &b), (&a, &a)] {
                let mut y = vec![0f32; a.len()];
                // SAFETY: t_b{i} is defined above as (const float *, const float *, float *, int64_t).
                unsafe {
                    let func = *o.lib.get::<F2>(format!("t_b{i}\0").as_bytes()).unwrap();
                    func(a.as_ptr(), b.as_ptr(), y.as_mut_ptr(), a.len() as i64);
                }
                for ((&p, &q), &g) in a.iter().zip(b.iter()).zip(&y) {
                    check(f.name(), g, f.eval(p, q), format!("{p:e}, {q:e}"));
                }
            }
        }
    }

    /// Compiles `p` (kernel `mk` must compile), runs it on inputs seeded with `seed` with the
    /// JIT and without: the inputs, the first output compiled, the first output interpreted.
    fn compiled_and_interpreted(
        p: &crate::fusion::Program,
        mk: usize,
        seed: u64,
    ) -> (
        std::collections::HashMap<String, Vec<f32>>,
        Vec<f32>,
        Vec<f32>,
    ) {
        let j = compile(p).unwrap();
        assert!(
            j.kernels[mk].is_some(),
            "the epilogue was compiled: {:?}",
            j.skipped
        );
        let mut ins = std::collections::HashMap::new();
        crate::exec::fill_inputs(&p.graph, &mut ins, seed).unwrap();
        let mut pool = crate::exec::Pool::default();
        let with = crate::exec::execute_with(p, &ins, &mut pool, Some(&j)).unwrap();
        let without = crate::exec::execute_with(p, &ins, &mut pool, None).unwrap();
        let (a, b) = (with.outputs[0].2.clone(), without.outputs[0].2.clone());
        (ins, a, b)
    }

    #[test]
    fn a_matmul_epilogue_is_compiled_and_agrees_with_the_interpreter() {
        // y = ReLU(x·w + b) + r: one matmul kernel; its bias, activation and residual run as
        // compiled code over the product faer computes, the product itself never stored.
        let g = crate::ir::Graph::from_json_str(
            r#"{"nodes":[
          {"name":"x","op":"Input","attrs":{"shape":[5,8],"dtype":"fp32"}},
          {"name":"w","op":"Input","attrs":{"shape":[8,12],"dtype":"fp32"}},
          {"name":"b","op":"Input","attrs":{"shape":[12],"dtype":"fp32"}},
          {"name":"r","op":"Input","attrs":{"shape":[5,12],"dtype":"fp32"}},
          {"name":"p","op":"MatMul","inputs":["x","w"]},
          {"name":"z","op":"Add","inputs":["p","b"]},
          {"name":"a","op":"ReLU","inputs":["z"]},
          {"name":"y","op":"Add","inputs":["a","r"]}]}"#,
        )
        .unwrap();
        let c = crate::fusion::compile(&g).unwrap();
        let mk = c
            .fused
            .kernels
            .iter()
            .position(|k| k.kind == crate::fusion::KernelKind::Matmul)
            .expect("a matmul kernel");
        assert_eq!(
            c.fused.kernels[mk].nodes.len(),
            4,
            "matmul with three epilogue nodes"
        );
        let (ins, a, b) = compiled_and_interpreted(&c.fused, mk, 7);
        let (a, b) = (&a, &b);
        assert_eq!(a.len(), 60);
        // Same product, same f32 operations in the same order: equal to the last bit.
        assert_eq!(a, b);
        // And against the definition, in f64.
        let v = |n: &str| &ins[n];
        for i in 0..5 {
            for jj in 0..12 {
                let dot: f64 = (0..8)
                    .map(|k| v("x")[i * 8 + k] as f64 * v("w")[k * 12 + jj] as f64)
                    .sum();
                let want = (dot + v("b")[jj] as f64).max(0.0) + v("r")[i * 12 + jj] as f64;
                assert!((a[i * 12 + jj] as f64 - want).abs() < 1e-5, "{i},{jj}");
            }
        }
    }

    #[test]
    fn an_epilogue_reading_the_product_through_a_view_is_compiled() {
        // GPT-2's exported MLP: the `[S, D]` product (a weight on the right, so the packed
        // GEMM computes it) viewed as `[1, S, D]`, then an activation with two branches
        // (y = tanh(m)·m). The epilogue reads the product through the view.
        let g = crate::ir::Graph::from_json_str(
            r#"{"nodes":[
          {"name":"x","op":"Input","attrs":{"shape":[7,40],"dtype":"fp32"}},
          {"name":"w","op":"Weight","attrs":{"shape":[40,24],"dtype":"fp32"}},
          {"name":"b","op":"Weight","attrs":{"shape":[24],"dtype":"fp32"}},
          {"name":"p","op":"MatMul","inputs":["x","w"]},
          {"name":"z","op":"Add","inputs":["p","b"]},
          {"name":"m","op":"Reshape","attrs":{"shape":[1,7,24]},"inputs":["z"]},
          {"name":"t","op":"Tanh","inputs":["m"]},
          {"name":"y","op":"Mul","inputs":["t","m"]}]}"#,
        )
        .unwrap();
        let c = crate::fusion::compile(&g).unwrap();
        assert_eq!(c.fused.kernels.len(), 1, "{:#?}", c.fused.kernels);
        let (ins, a, b) = compiled_and_interpreted(&c.fused, 0, 11);
        assert_eq!(a.len(), 7 * 24);
        let v = |n: &str| &ins[n];
        for i in 0..7 {
            for jj in 0..24 {
                let dot: f64 = (0..40)
                    .map(|k| v("x")[i * 40 + k] as f64 * v("w")[k * 24 + jj] as f64)
                    .sum();
                let m = dot + v("b")[jj] as f64;
                let want = m.tanh() * m;
                let scale = want.abs().max(1.0);
                for (what, got) in [
                    ("compiled", a[i * 24 + jj]),
                    ("interpreted", b[i * 24 + jj]),
                ] {
                    assert!(
                        (got as f64 - want).abs() < 1e-5 * scale,
                        "{what} {i},{jj}: {got} vs {want}"
                    );
                }
            }
        }
    }

    #[test]
    fn a_gated_mlp_epilogue_reads_both_products() {
        // y = silu(x·wg) · (x·wu), Llama's gate and up projections: one matmul kernel with
        // two MatMuls; both products are computed whole, then one compiled epilogue reads
        // them (before, such a kernel was left to the interpreter).
        let g = crate::ir::Graph::from_json_str(
            r#"{"nodes":[
          {"name":"x","op":"Input","attrs":{"shape":[6,16],"dtype":"fp32"}},
          {"name":"wg","op":"Input","attrs":{"shape":[16,24],"dtype":"fp32"}},
          {"name":"wu","op":"Input","attrs":{"shape":[16,24],"dtype":"fp32"}},
          {"name":"g","op":"MatMul","inputs":["x","wg"]},
          {"name":"s","op":"Sigmoid","inputs":["g"]},
          {"name":"a","op":"Mul","inputs":["g","s"]},
          {"name":"u","op":"MatMul","inputs":["x","wu"]},
          {"name":"y","op":"Mul","inputs":["a","u"]}]}"#,
        )
        .unwrap();
        let c = crate::fusion::compile(&g).unwrap();
        let mk = c
            .fused
            .kernels
            .iter()
            .position(|k| {
                k.nodes
                    .iter()
                    .filter(|&&n| matches!(c.fused.graph.nodes[n].op, crate::ir::Op::MatMul))
                    .count()
                    == 2
            })
            .expect("one kernel holding both products");
        let (ins, a, b) = compiled_and_interpreted(&c.fused, mk, 11);
        let (a, b) = (&a, &b);
        assert_eq!(a.len(), 6 * 24);
        let v = |n: &str| &ins[n];
        for i in 0..6 {
            for jj in 0..24 {
                let dot = |w: &str| -> f64 {
                    (0..16)
                        .map(|k| v("x")[i * 16 + k] as f64 * v(w)[k * 24 + jj] as f64)
                        .sum()
                };
                let (gv, uv) = (dot("wg"), dot("wu"));
                let want = gv / (1.0 + (-gv).exp()) * uv;
                let at = i * 24 + jj;
                assert!((a[at] as f64 - want).abs() < 1e-5, "compiled {i},{jj}");
                assert!((b[at] as f64 - want).abs() < 1e-5, "interpreted {i},{jj}");
            }
        }
    }

    #[test]
    fn identical_kernels_are_compiled_once() {
        // Three layers: their kernels differ only in name and in row count (a run-time
        // range), so all run one compiled function; a fourth with another width does not.
        let g = crate::ir::Graph::from_json_str(
            r#"{"nodes":[
          {"name":"x","op":"Input","attrs":{"shape":[4,64],"dtype":"fp32"}},
          {"name":"y","op":"Input","attrs":{"shape":[4,64],"dtype":"fp32"}},
          {"name":"z","op":"Input","attrs":{"shape":[8,64],"dtype":"fp32"}},
          {"name":"e1","op":"Exp","inputs":["x"]},
          {"name":"s1","op":"Softmax","inputs":["e1"]},
          {"name":"e2","op":"Exp","inputs":["y"]},
          {"name":"s2","op":"Softmax","inputs":["e2"]},
          {"name":"e3","op":"Exp","inputs":["z"]},
          {"name":"s3","op":"Softmax","inputs":["e3"]},
          {"name":"w","op":"Input","attrs":{"shape":[4,32],"dtype":"fp32"}},
          {"name":"e4","op":"Exp","inputs":["w"]},
          {"name":"s4","op":"Softmax","inputs":["e4"]}]}"#,
        )
        .unwrap();
        let c = crate::fusion::compile(&g).unwrap();
        let j = compile(&c.fused).unwrap();
        let fs: Vec<usize> = j.kernels.iter().flatten().map(|k| k.f as usize).collect();
        assert_eq!(fs.len(), 4, "one kernel per softmax chain");
        let distinct: std::collections::BTreeSet<usize> = fs.iter().copied().collect();
        assert_eq!(distinct.len(), 2, "{fs:?}");
        assert_eq!(fs[0], fs[1]);
        assert_eq!(fs[0], fs[2]);
        assert_ne!(fs[0], fs[3]);
    }

    #[test]
    fn cache_keys_change_with_source_compiler_and_flags() {
        let a = cache_key("int x;", "cc", "gcc 12");
        assert_eq!(a.len(), 64);
        assert_ne!(a, cache_key("int y;", "cc", "gcc 12"));
        assert_ne!(a, cache_key("int x;", "clang", "gcc 12"));
        assert_ne!(a, cache_key("int x;", "cc", "gcc 13"));
        assert_eq!(a, cache_key("int x;", "cc", "gcc 12"));
    }
}

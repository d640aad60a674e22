//! Opening a GPU: the `--device` argument, the checks that turn a missing driver or device
//! into a one-line error (cudarc's loaders panic when a library is absent, so presence is
//! tested first), and the device's identity and state for a record: name, UUID, compute
//! capability, SMs, memory and L2 from the driver; driver version, SM and memory clocks and
//! the power limit from NVML where it loads. Left out: MIG instances, multi-GPU, clock
//! locking (the clocks are recorded, not set).

use crate::error::{CudaError, Result};
use cudarc::driver::sys::CUdevice_attribute as Attr;
use cudarc::driver::{CudaContext, CudaStream};
use serde::Serialize;
use std::sync::Arc;
use tensorforge_store::{DeviceContext, GpuContext};

/// Where to run: the host CPU or one CUDA device.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum DeviceSpec {
    /// The CPU executor and harness.
    Cpu,
    /// CUDA device `N` (driver ordinal).
    Cuda(usize),
}

impl DeviceSpec {
    /// Parse `cpu`, `cuda` (device 0) or `cuda:N`.
    ///
    /// ```
    /// use tensorforge_cuda::device::DeviceSpec;
    /// assert_eq!(DeviceSpec::parse("cuda").unwrap(), DeviceSpec::Cuda(0));
    /// assert_eq!(DeviceSpec::parse("cuda:1").unwrap(), DeviceSpec::Cuda(1));
    /// assert_eq!(DeviceSpec::parse("cpu").unwrap(), DeviceSpec::Cpu);
    /// assert!(DeviceSpec::parse("gpu").is_err());
    /// ```
    pub fn parse(s: &str) -> Result<DeviceSpec> {
        let bad = || CudaError::BadDevice { value: s.into() };
        match s.trim() {
            "cpu" => Ok(DeviceSpec::Cpu),
            "cuda" => Ok(DeviceSpec::Cuda(0)),
            t => {
                let n = t.strip_prefix("cuda:").ok_or_else(bad)?;
                if n.is_empty() || !n.bytes().all(|b| b.is_ascii_digit()) || n.len() > 4 {
                    return Err(bad());
                }
                n.parse().map(DeviceSpec::Cuda).map_err(|_| bad())
            }
        }
    }
}

/// Whether the NVIDIA driver library (`libcuda.so`) can be loaded here.
pub fn driver_available() -> bool {
    // SAFETY: dlopen of candidate names; no symbol of the library is called.
    unsafe { cudarc::driver::sys::is_culib_present() }
}

/// Whether cuBLAS can be loaded here.
pub fn cublas_available() -> bool {
    // SAFETY: as above.
    unsafe { cudarc::cublas::sys::is_culib_present() }
}

/// The error for a machine without the driver.
pub fn driver_missing() -> CudaError {
    CudaError::Missing {
        what: "the NVIDIA driver",
        tried: "libcuda.so, libcuda.so.1".into(),
        hint: "`--device cuda` needs an NVIDIA GPU and its driver (nvidia-smi should list the GPU)",
    }
}

/// The number of CUDA devices, or why there is none.
pub fn device_count() -> Result<usize> {
    if !driver_available() {
        return Err(driver_missing());
    }
    cudarc::driver::result::init().map_err(CudaError::driver("cuInit"))?;
    let n = CudaContext::device_count().map_err(CudaError::driver("cuDeviceGetCount"))?;
    Ok(n.max(0) as usize)
}

/// What a record says about the GPU it ran on.
#[derive(Debug, Clone, PartialEq, Serialize, serde::Deserialize)]
pub struct GpuInfo {
    /// Driver ordinal.
    pub ordinal: usize,
    /// Device name.
    pub name: String,
    /// `GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx`.
    pub uuid: String,
    /// Compute capability `(major, minor)`.
    pub compute_capability: (i32, i32),
    /// Streaming multiprocessors.
    pub sm_count: u32,
    /// Device memory, bytes.
    pub memory_bytes: u64,
    /// L2 cache, bytes.
    pub l2_bytes: u64,
    /// CUDA driver API version (`12080` = 12.8).
    pub driver_api_version: i32,
    /// NVML's driver version string, when NVML loads.
    pub driver_version: Option<String>,
    /// SM clock now, MHz (NVML).
    pub sm_clock_mhz: Option<u32>,
    /// Memory clock now, MHz (NVML).
    pub memory_clock_mhz: Option<u32>,
    /// Enforced power limit, W (NVML).
    pub power_limit_w: Option<f64>,
}

impl GpuInfo {
    /// The architecture NVRTC compiles for (`sm_90` for compute capability 9.0), one of
    /// those this crate knows; newer GPUs run `sm_90` PTX through the driver's JIT.
    pub fn arch(&self) -> &'static str {
        match self.compute_capability {
            (7, 0) => "sm_70",
            (7, 5) => "sm_75",
            (8, 0) => "sm_80",
            (8, 6) => "sm_86",
            (8, 9) => "sm_89",
            (9, _) => "sm_90",
            (m, _) if m >= 10 => "sm_90",
            _ => "sm_70",
        }
    }

    /// The record's GPU context.
    pub fn context(&self) -> GpuContext {
        GpuContext {
            name: self.name.clone(),
            index: self.ordinal as u32,
            driver: Some(self.driver_version.clone().unwrap_or_else(|| {
                format!(
                    "CUDA {}.{}",
                    self.driver_api_version / 1000,
                    (self.driver_api_version % 1000) / 10
                )
            })),
            compute_capability: Some(format!(
                "{}.{}",
                self.compute_capability.0, self.compute_capability.1
            )),
            memory_bytes: Some(self.memory_bytes),
            uuid: Some(self.uuid.clone()),
            sm_count: Some(self.sm_count),
            l2_bytes: Some(self.l2_bytes),
            sm_clock_mhz: self.sm_clock_mhz,
            memory_clock_mhz: self.memory_clock_mhz,
            power_limit_w: self.power_limit_w,
        }
    }

    /// The record's device context: the host's, with kind `gpu`, this GPU, and a machine id
    /// that is the GPU's (sha256 of name and UUID, 16 hex digits), so a gate compares runs on
    /// the same GPU.
    pub fn device_context(&self) -> DeviceContext {
        let mut d = tensorforge_measure::context::device_context(1);
        d.kind = "gpu".into();
        let mut id = tensorforge_core::digest::sha256_hex(&[
            b"gpu|",
            self.name.as_bytes(),
            b"|",
            self.uuid.as_bytes(),
        ]);
        id.truncate(16);
        d.machine_id = id;
        d.gpu = Some(self.context());
        d
    }
}

/// `GPU-` and the 16 bytes in the 8-4-4-4-12 grouping `nvidia-smi -L` prints.
pub fn format_uuid(b: &[u8; 16]) -> String {
    let h: String = b.iter().map(|x| format!("{x:02x}")).collect();
    format!(
        "GPU-{}-{}-{}-{}-{}",
        &h[0..8],
        &h[8..12],
        &h[12..16],
        &h[16..20],
        &h[20..32]
    )
}

/// An open GPU: its context, the stream everything runs on, and its identity.
pub struct Gpu {
    /// The primary context.
    pub ctx: Arc<CudaContext>,
    /// The stream measurements use.
    pub stream: Arc<CudaStream>,
    /// Identity and state.
    pub info: GpuInfo,
}

impl Gpu {
    /// Open device `ordinal`, or say in one line what is missing.
    pub fn open(ordinal: usize) -> Result<Gpu> {
        let count = device_count()?;
        if ordinal >= count {
            return Err(CudaError::NoDevice { ordinal, count });
        }
        let ctx = CudaContext::new(ordinal).map_err(CudaError::driver("creating a context"))?;
        let stream = ctx.default_stream();
        let attr = |a: Attr| {
            ctx.attribute(a)
                .map_err(CudaError::driver("cuDeviceGetAttribute"))
        };
        let uuid = ctx.uuid().map_err(CudaError::driver("cuDeviceGetUuid"))?;
        let bytes: [u8; 16] = uuid.bytes.map(|b| b as u8);
        let mut driver_api_version = 0i32;
        // SAFETY: the driver is loaded (device_count succeeded); the pointer is valid.
        unsafe { cudarc::driver::sys::cuDriverGetVersion(&mut driver_api_version) };
        let mut info = GpuInfo {
            ordinal,
            name: ctx.name().map_err(CudaError::driver("cuDeviceGetName"))?,
            uuid: format_uuid(&bytes),
            compute_capability: ctx
                .compute_capability()
                .map_err(CudaError::driver("compute capability"))?,
            sm_count: attr(Attr::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)?.max(0) as u32,
            memory_bytes: ctx
                .total_mem()
                .map_err(CudaError::driver("cuDeviceTotalMem"))? as u64,
            l2_bytes: attr(Attr::CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE)?.max(0) as u64,
            driver_api_version,
            driver_version: None,
            sm_clock_mhz: None,
            memory_clock_mhz: None,
            power_limit_w: None,
        };
        read_nvml(&mut info);
        Ok(Gpu { ctx, stream, info })
    }
}

/// Fill the NVML fields of `info` where NVML loads and knows the device (matched by UUID);
/// leave them empty otherwise (a container may lack NVML).
fn read_nvml(info: &mut GpuInfo) {
    use nvml_wrapper::enum_wrappers::device::Clock;
    let Ok(nvml) = nvml_wrapper::Nvml::init() else {
        return;
    };
    info.driver_version = nvml.sys_driver_version().ok();
    let Ok(dev) = nvml.device_by_uuid(info.uuid.as_str()) else {
        return;
    };
    info.sm_clock_mhz = dev.clock_info(Clock::SM).ok();
    info.memory_clock_mhz = dev.clock_info(Clock::Memory).ok();
    info.power_limit_w = dev
        .enforced_power_limit()
        .ok()
        .map(|mw| f64::from(mw) / 1000.0);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn device_specs_parse_and_bad_ones_name_the_value() {
        assert_eq!(DeviceSpec::parse("cuda:0").unwrap(), DeviceSpec::Cuda(0));
        assert_eq!(DeviceSpec::parse("cuda:12").unwrap(), DeviceSpec::Cuda(12));
        for bad in [
            "cuda:",
            "cuda:-1",
            "cuda:x",
            "cuda:99999",
            "gpu",
            "",
            "cuda:1:2",
        ] {
            let e = DeviceSpec::parse(bad).unwrap_err().to_string();
            assert!(e.contains(&format!("`{bad}`")), "{e}");
        }
    }

    #[test]
    fn uuids_print_as_nvidia_smi_does() {
        let b: [u8; 16] = [
            0x12, 0x34, 0x56, 0x78, 0x9a, 0xbc, 0xde, 0xf0, 0x01, 0x23, 0x45, 0x67, 0x89, 0xab,
            0xcd, 0xef,
        ];
        assert_eq!(format_uuid(&b), "GPU-12345678-9abc-def0-0123-456789abcdef");
    }

    /// Without a driver, opening a device is the one-line error naming the driver; with
    /// one, an index past the last device names the count.
    #[test]
    fn a_missing_driver_or_device_is_a_clean_error() {
        if driver_available() {
            // A driver without a usable device fails at cuInit instead: also a clean error.
            match Gpu::open(4096) {
                Err(CudaError::NoDevice { ordinal: 4096, .. }) | Err(CudaError::Driver { .. }) => {}
                Err(e) => panic!("unexpected error: {e}"),
                Ok(_) => panic!("device 4096 opened"),
            }
        } else {
            let e = Gpu::open(0).err().expect("no driver, yet a device opened");
            let s = e.to_string();
            assert!(s.contains("NVIDIA driver") && !s.contains('\n'), "{s}");
        }
    }
}

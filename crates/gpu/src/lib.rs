//! GPU memory as an RDMA source and target: CUDA buffers through the driver library, loaded
//! at run time.
//!
//! The same podnet binary starts on a host without CUDA: [`Gpu::count`] and [`Gpu::open`]
//! first look for the driver library (`libcuda.so`, without calling into it) and answer
//! [`GpuError::NoDriver`] where there is none. A [`GpuBuffer`] is [`verbs::DeviceMemory`]:
//! registered with [`verbs::ProtectionDomain::reg_device_mr`], the soft provider copies each
//! payload through the GPU's copy engine and the rdma-core provider registers its dma-buf
//! (`cuMemGetHandleForAddressRange`).

use std::sync::Arc;

use cudarc::driver::{result, sys};

/// Why GPU memory is not to be had.
#[derive(Debug, thiserror::Error)]
pub enum GpuError {
    /// No CUDA driver library on this host.
    #[error(
        "no CUDA driver library (libcuda.so.1) on this host: GPU memory needs the NVIDIA driver"
    )]
    NoDriver,
    /// The driver library lacks an entry point podnet calls (an older driver, or not
    /// NVIDIA's library).
    #[error(
        "the CUDA driver library ({library}) has no {symbol}: a driver older than podnet needs \
         (CUDA 12.2), or not NVIDIA's library"
    )]
    OldDriver {
        /// The library loaded.
        library: String,
        /// The first entry point missing.
        symbol: &'static str,
    },
    /// The host has fewer GPUs.
    #[error("GPU {asked} does not exist: this host has {count} CUDA device(s)")]
    NoDevice {
        /// The ordinal asked for.
        asked: u32,
        /// How many there are.
        count: u32,
    },
    /// A driver call failed.
    #[error("{call} failed: {name} ({code})")]
    Driver {
        /// The driver function.
        call: &'static str,
        /// Its `CUresult`.
        code: u32,
        /// The result's name (`CUDA_ERROR_OUT_OF_MEMORY`).
        name: String,
    },
    /// The GPU cannot do it.
    #[error("{0}")]
    Unsupported(&'static str),
}

impl From<GpuError> for std::io::Error {
    fn from(e: GpuError) -> std::io::Error {
        let kind = match e {
            GpuError::Unsupported(_) => std::io::ErrorKind::Unsupported,
            GpuError::NoDriver | GpuError::NoDevice { .. } => std::io::ErrorKind::NotFound,
            GpuError::Driver { .. } | GpuError::OldDriver { .. } => std::io::ErrorKind::Other,
        };
        std::io::Error::new(kind, e)
    }
}

/// A failed call as [`GpuError::Driver`].
fn driver(call: &'static str) -> impl Fn(result::DriverError) -> GpuError {
    move |e| GpuError::Driver {
        call,
        code: e.0 as u32,
        name: e.error_name().map_or_else(|_| "unknown".into(), |n| n.to_string_lossy().into()),
    }
}

/// Whether the driver library can be loaded: asked before any call into it, since the
/// loader panics when it finds none.
pub fn driver_present() -> bool {
    // SAFETY: only tries to open the library under each of its names (no call into it).
    unsafe { sys::is_culib_present() }
}

/// Every driver entry point podnet calls (what `crates/cuda-stub` implements): the loader
/// panics on the first call to one the library lacks, so each is looked up first.
const ENTRY_POINTS: &[&str] = &[
    "cuInit",
    "cuDriverGetVersion",
    "cuDeviceGetCount",
    "cuDeviceGet",
    "cuDeviceGetName",
    "cuDeviceGetPCIBusId",
    "cuDeviceGetAttribute",
    "cuDevicePrimaryCtxRetain",
    "cuDevicePrimaryCtxRelease_v2",
    "cuCtxSetCurrent",
    "cuMemAlloc_v2",
    "cuMemFree_v2",
    "cuMemHostAlloc",
    "cuMemFreeHost",
    "cuMemcpyHtoD_v2",
    "cuMemcpyHtoDAsync_v2",
    "cuMemcpyDtoH_v2",
    "cuStreamCreate",
    "cuStreamSynchronize",
    "cuStreamDestroy_v2",
    "cuMemGetHandleForAddressRange",
    "cuGetErrorName",
    "cuGetErrorString",
];

/// The library the loader will take (the first of its names that loads), and the first of
/// [`ENTRY_POINTS`] it lacks.
fn missing_entry_point() -> Option<(String, &'static str)> {
    for name in cudarc::get_lib_name_candidates("cuda") {
        // SAFETY: loading the library runs its initializers, as the loader itself would on
        // the first call; no symbol is called here, only looked up.
        let Ok(lib) = (unsafe { libloading::Library::new(&name) }) else { continue };
        for sym in ENTRY_POINTS {
            // SAFETY: the symbol is only looked up, never called through this type.
            let found = unsafe { lib.get::<unsafe extern "C" fn()>(sym.as_bytes()) };
            if found.is_err() {
                return Some((name, sym));
            }
        }
        return None;
    }
    None
}

/// Loads the driver and initializes it (`cuInit`), once the library is known to be there
/// with every entry point podnet calls.
fn init() -> Result<(), GpuError> {
    if !driver_present() {
        return Err(GpuError::NoDriver);
    }
    static CHECKED: std::sync::OnceLock<Option<(String, &'static str)>> =
        std::sync::OnceLock::new();
    if let Some((library, symbol)) = CHECKED.get_or_init(missing_entry_point).clone() {
        return Err(GpuError::OldDriver { library, symbol });
    }
    result::init().map_err(driver("cuInit"))
}

/// One GPU, with its primary context made current on each thread that copies.
#[derive(Debug)]
pub struct Gpu {
    ordinal: u32,
    dev: sys::CUdevice,
    ctx: Context,
    name: String,
    pci: String,
    dma_buf: bool,
}

/// A CUDA context handle.
#[derive(Debug)]
struct Context(sys::CUcontext);

// SAFETY: a CUDA context may be made current on any thread (the driver serializes what it
// must); the handle is only passed to the driver.
unsafe impl Send for Context {}
// SAFETY: as for Send: the handle is never dereferenced by podnet.
unsafe impl Sync for Context {}

impl Gpu {
    /// How many GPUs this host has; [`GpuError::NoDriver`] without the driver library.
    pub fn count() -> Result<u32, GpuError> {
        init()?;
        let n = result::device::get_count().map_err(driver("cuDeviceGetCount"))?;
        Ok(u32::try_from(n).unwrap_or(0))
    }

    /// GPU `ordinal`, its primary context retained.
    pub fn open(ordinal: u32) -> Result<Arc<Gpu>, GpuError> {
        let count = Gpu::count()?;
        if ordinal >= count {
            return Err(GpuError::NoDevice { asked: ordinal, count });
        }
        let dev = result::device::get(ordinal as i32).map_err(driver("cuDeviceGet"))?;
        // SAFETY: `dev` came from cuDeviceGet.
        let ctx = unsafe { result::primary_ctx::retain(dev) }
            .map_err(driver("cuDevicePrimaryCtxRetain"))?;
        let name = result::device::get_name(dev).map_err(driver("cuDeviceGetName"))?;
        let mut bus = [0 as std::ffi::c_char; 32];
        // SAFETY: the buffer is 32 bytes, as its length says; the driver NUL-terminates.
        unsafe { sys::cuDeviceGetPCIBusId(bus.as_mut_ptr(), bus.len() as i32, dev) }
            .result()
            .map_err(driver("cuDeviceGetPCIBusId"))?;
        // SAFETY: NUL-terminated within the buffer (the driver's contract; zeroed before).
        let pci = unsafe { std::ffi::CStr::from_ptr(bus.as_ptr()) }
            .to_string_lossy()
            .to_ascii_lowercase();
        // SAFETY: `dev` came from cuDeviceGet.
        let dma_buf = unsafe {
            result::device::get_attribute(
                dev,
                sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED,
            )
        }
        .is_ok_and(|v| v != 0);
        Ok(Arc::new(Gpu { ordinal, dev, ctx: Context(ctx), name, pci, dma_buf }))
    }

    /// Its CUDA ordinal.
    pub fn ordinal(&self) -> u32 {
        self.ordinal
    }

    /// Its name (`NVIDIA H200`).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Its PCI address, as sysfs writes it (`0000:3c:00.0`).
    pub fn pci_bus_id(&self) -> &str {
        &self.pci
    }

    /// Whether it exports its memory as dma-bufs (`CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED`).
    pub fn dma_buf_supported(&self) -> bool {
        self.dma_buf
    }

    /// Makes its context current on this thread.
    fn bind(&self) -> Result<(), GpuError> {
        // SAFETY: the context was retained by `open` and is released only on drop.
        unsafe { result::ctx::set_current(self.ctx.0) }.map_err(driver("cuCtxSetCurrent"))
    }

    /// `len` bytes of GPU memory, zeroed (`cuMemAlloc`, rounded up to 64 KiB so that a
    /// dma-buf of it covers whole host pages).
    pub fn alloc(self: &Arc<Self>, len: usize) -> Result<GpuBuffer, GpuError> {
        self.bind()?;
        let size = len.max(1).div_ceil(ALIGN) * ALIGN;
        // SAFETY: a plain allocation; freed by GpuBuffer's drop.
        let ptr = unsafe { result::malloc_sync(size) }.map_err(driver("cuMemAlloc"))?;
        let b = GpuBuffer { gpu: self.clone(), ptr, len, size, stage: Default::default() };
        b.zero()?;
        Ok(b)
    }
}

/// Pinned host memory (`cuMemHostAlloc`), for copies at the copy engine's full speed.
#[derive(Debug)]
struct Pinned {
    ptr: *mut std::ffi::c_void,
    len: usize,
}

// SAFETY: the allocation is owned by this value alone and only touched through `&mut self`
// (or under the stage's mutex); the driver's pinned memory may be used from any thread.
unsafe impl Send for Pinned {}

impl Pinned {
    fn new(gpu: &Gpu, len: usize) -> Result<Pinned, GpuError> {
        gpu.bind()?;
        // SAFETY: a plain allocation, freed by drop.
        let ptr = unsafe { result::malloc_host(len, 0) }.map_err(driver("cuMemHostAlloc"))?;
        Ok(Pinned { ptr, len })
    }

    fn bytes(&mut self) -> &mut [u8] {
        // SAFETY: `len` bytes the driver allocated, owned by `self`.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.cast(), self.len) }
    }
}

impl Drop for Pinned {
    fn drop(&mut self) {
        // SAFETY: allocated by cuMemHostAlloc, freed once.
        let _ = unsafe { result::free_host(self.ptr) };
    }
}

/// What the copy engine moved: bytes per second host to device and device to host.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CopyBandwidth {
    /// Host (pinned) to device, GB/s (10^9 bytes).
    pub htod_gbs: f64,
    /// Device to host (pinned), GB/s.
    pub dtoh_gbs: f64,
}

impl Gpu {
    /// Measures synchronous copies of `len` bytes between pinned host memory and the GPU,
    /// `iters` times each way (what `cudaMemcpy` with pinned memory reaches: the figure a
    /// soft provider's GPU path is bounded by).
    pub fn copy_bandwidth(
        self: &Arc<Self>,
        len: usize,
        iters: u32,
    ) -> Result<CopyBandwidth, GpuError> {
        let dev = self.alloc(len)?;
        let mut host = Pinned::new(self, len)?;
        host.bytes().fill(0x5a);
        let time = |f: &mut dyn FnMut() -> Result<(), GpuError>| -> Result<f64, GpuError> {
            f()?; // warm-up
            let t = std::time::Instant::now();
            for _ in 0..iters {
                f()?;
            }
            Ok(len as f64 * f64::from(iters) / t.elapsed().as_secs_f64().max(1e-9) / 1e9)
        };
        let htod_gbs = time(&mut || {
            let h = host.bytes();
            dev.copy_in(0, h)
        })?;
        let dtoh_gbs = time(&mut || {
            let h = host.bytes();
            dev.copy_out(0, h)
        })?;
        Ok(CopyBandwidth { htod_gbs, dtoh_gbs })
    }
}

impl Drop for Gpu {
    fn drop(&mut self) {
        // SAFETY: `dev` came from cuDeviceGet and its primary context was retained once.
        let _ = unsafe { result::primary_ctx::release(self.dev) };
    }
}

/// What an allocation is rounded up to.
const ALIGN: usize = 64 << 10;

/// A buffer in a GPU's memory.
#[derive(Debug)]
pub struct GpuBuffer {
    gpu: Arc<Gpu>,
    ptr: sys::CUdeviceptr,
    len: usize,
    /// What was allocated (`len` rounded up).
    size: usize,
    /// Contiguous small writes gathered in pinned host memory, copied in one go.
    stage: std::sync::Mutex<Stage>,
}

/// Writes staged for one copy: `len` bytes for `[start, start + len)` of the buffer, in the
/// current of two pinned buffers; the other may be on its way to the GPU (an asynchronous
/// copy on `stream`, waited for before that buffer is filled again or the stage flushed).
#[derive(Debug, Default)]
struct Stage {
    pinned: [Option<Pinned>; 2],
    /// Which of the two is being filled.
    cur: usize,
    start: usize,
    len: usize,
    /// A copy is in flight on the stream.
    in_flight: bool,
    stream: Option<Stream>,
    /// Read ahead: `[ahead_start, ahead_start + ahead_len)` of the buffer, in `ahead`.
    ahead: Option<Pinned>,
    ahead_start: usize,
    ahead_len: usize,
}

/// A CUDA stream of the buffer's own.
#[derive(Debug)]
struct Stream(sys::CUstream);

// SAFETY: a stream handle may be used from any thread that has its context current; it is
// only passed to the driver, under the stage's mutex.
unsafe impl Send for Stream {}

/// How far a packet-sized read reads ahead: a soft device gathers a message packet by packet.
const AHEAD: usize = 256 << 10;

/// Reads from this size up are served through the read-ahead (packets); smaller ones (an
/// atomic's 8 bytes) go straight to the GPU.
const AHEAD_FROM: usize = 1024;

/// How much a stage gathers: a soft device places a message packet by packet (an MTU each),
/// and one copy of a megabyte from pinned memory costs what one of a few kilobytes does.
const STAGE: usize = 1 << 20;

impl GpuBuffer {
    /// The GPU it is on.
    pub fn gpu(&self) -> &Arc<Gpu> {
        &self.gpu
    }

    fn zero(&self) -> Result<(), GpuError> {
        let z = vec![0u8; (1 << 20).min(self.size)];
        let mut at = 0;
        while at < self.size {
            let n = z.len().min(self.size - at);
            self.copy_in(at, &z[..n])?;
            at += n;
        }
        Ok(())
    }

    fn check(&self, offset: usize, len: usize) -> Result<(), GpuError> {
        match offset.checked_add(len) {
            Some(end) if end <= self.len => Ok(()),
            _ => Err(GpuError::Unsupported("a copy outside the GPU buffer")),
        }
    }

    /// Copies `data` to `offset` (host to device, synchronous).
    fn copy_in(&self, offset: usize, data: &[u8]) -> Result<(), GpuError> {
        self.gpu.bind()?;
        // SAFETY: `[offset, offset + data.len())` lies inside the allocation (checked by the
        // callers), which lives as long as `self`.
        unsafe { result::memcpy_htod_sync(self.ptr + offset as u64, data) }
            .map_err(driver("cuMemcpyHtoD"))
    }

    /// Copies `out.len()` bytes at `offset` out (device to host, synchronous).
    fn copy_out(&self, offset: usize, out: &mut [u8]) -> Result<(), GpuError> {
        self.gpu.bind()?;
        // SAFETY: as in copy_in.
        unsafe { result::memcpy_dtoh_sync(out, self.ptr + offset as u64) }
            .map_err(driver("cuMemcpyDtoH"))
    }
}

impl GpuBuffer {
    fn stage(&self) -> std::sync::MutexGuard<'_, Stage> {
        self.stage.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Waits for the copy in flight, if any.
    fn settle(&self, st: &mut Stage) -> Result<(), GpuError> {
        if let (true, Some(s)) = (st.in_flight, &st.stream) {
            self.gpu.bind()?;
            // SAFETY: the stream was created by `launch` in this buffer's context.
            unsafe { result::stream::synchronize(s.0) }.map_err(driver("cuStreamSynchronize"))?;
        }
        st.in_flight = false;
        Ok(())
    }

    /// Sends what `st` holds to the GPU (one asynchronous copy from pinned memory, after the
    /// previous one has landed) and moves on to the other pinned buffer: filling it overlaps
    /// the copy.
    fn launch(&self, st: &mut Stage) -> Result<(), GpuError> {
        if st.len == 0 {
            return Ok(());
        }
        self.settle(st)?;
        let (start, len, cur) = (st.start, st.len, st.cur);
        st.len = 0;
        if st.stream.is_none() {
            self.gpu.bind()?;
            let s = result::stream::create(result::stream::StreamKind::NonBlocking)
                .map_err(driver("cuStreamCreate"))?;
            st.stream = Some(Stream(s));
        }
        let (Some(p), Some(stream)) = (st.pinned[cur].as_mut(), st.stream.as_ref()) else {
            return Ok(());
        };
        self.gpu.bind()?;
        let bytes = &p.bytes()[..len];
        // SAFETY: the range lies in the allocation (checked when staged); the pinned bytes
        // stay untouched until `settle` has waited for this copy (the next launch, a flush,
        // or before this buffer is filled again).
        unsafe { result::memcpy_htod_async(self.ptr + start as u64, bytes, stream.0) }
            .map_err(driver("cuMemcpyHtoDAsync"))?;
        st.in_flight = true;
        st.cur = 1 - cur;
        Ok(())
    }

    /// Everything staged is in the GPU.
    fn flush_stage(&self, st: &mut Stage) -> Result<(), GpuError> {
        self.launch(st)?;
        self.settle(st)
    }

    /// Reads `out.len()` bytes at `offset`: what was staged first, then from the read-ahead
    /// (refilled with the next [`AHEAD`] bytes when it does not hold them) for packet-sized
    /// reads, straight from the GPU otherwise.
    fn read_through(&self, offset: usize, out: &mut [u8]) -> Result<(), GpuError> {
        let mut st = self.stage();
        self.flush_stage(&mut st)?;
        let n = out.len();
        if !(AHEAD_FROM..=AHEAD / 4).contains(&n) {
            return self.copy_out(offset, out);
        }
        let held = offset >= st.ahead_start && offset + n <= st.ahead_start + st.ahead_len;
        if !held {
            let len = AHEAD.min(self.len - offset);
            if st.ahead.is_none() {
                st.ahead = Some(Pinned::new(&self.gpu, AHEAD)?);
            }
            let Some(p) = st.ahead.as_mut() else { return self.copy_out(offset, out) };
            self.copy_out(offset, &mut p.bytes()[..len])?;
            st.ahead_start = offset;
            st.ahead_len = len;
        }
        let at = offset - st.ahead_start;
        let Some(p) = st.ahead.as_mut() else { return self.copy_out(offset, out) };
        out.copy_from_slice(&p.bytes()[at..at + n]);
        Ok(())
    }

    /// Forgets what was read ahead (the GPU's bytes may have changed behind it).
    fn forget_ahead(st: &mut Stage) {
        st.ahead_len = 0;
    }

    /// Stages `data` for `offset` when it continues what is staged (or starts a new stage),
    /// forgetting any read-ahead it overlaps; a large write goes straight to the GPU.
    fn staged_write(&self, offset: usize, data: &[u8]) -> Result<(), GpuError> {
        let mut st = self.stage();
        if offset < st.ahead_start + st.ahead_len && st.ahead_start < offset + data.len() {
            GpuBuffer::forget_ahead(&mut st);
        }
        let follows = st.len > 0 && st.start + st.len == offset && st.len + data.len() <= STAGE;
        if !follows {
            if data.len() > STAGE / 4 {
                // Large: straight to the GPU, after what was staged before it.
                self.flush_stage(&mut st)?;
                return self.copy_in(offset, data);
            }
            // The staged run ends: on its way, and this one starts in the other buffer.
            self.launch(&mut st)?;
            st.start = offset;
        }
        let cur = st.cur;
        if st.pinned[cur].is_none() {
            st.pinned[cur] = Some(Pinned::new(&self.gpu, STAGE.min(self.size))?);
        }
        let at = st.len;
        let Some(p) = st.pinned[cur].as_mut() else { return self.copy_in(offset, data) };
        if at + data.len() > p.len {
            self.flush_stage(&mut st)?;
            return self.copy_in(offset, data);
        }
        p.bytes()[at..at + data.len()].copy_from_slice(data);
        st.len += data.len();
        Ok(())
    }
}

impl Drop for GpuBuffer {
    fn drop(&mut self) {
        let mut st = std::mem::take(&mut *self.stage());
        let _ = self.settle(&mut st);
        if let Some(s) = st.stream.take()
            && self.gpu.bind().is_ok()
        {
            // SAFETY: created by `launch`, destroyed once, nothing in flight (settled).
            let _ = unsafe { result::stream::destroy(s.0) };
        }
        if self.gpu.bind().is_ok() {
            // SAFETY: allocated by cuMemAlloc in `alloc`, freed once here.
            let _ = unsafe { result::free_sync(self.ptr) };
        }
    }
}

impl verbs::DeviceMemory for GpuBuffer {
    fn addr(&self) -> u64 {
        self.ptr
    }

    fn len(&self) -> usize {
        self.len
    }

    fn read(&self, offset: usize, out: &mut [u8]) -> std::io::Result<()> {
        self.check(offset, out.len())?;
        Ok(self.read_through(offset, out)?)
    }

    fn write(&self, offset: usize, data: &[u8]) -> std::io::Result<()> {
        self.check(offset, data.len())?;
        Ok(self.staged_write(offset, data)?)
    }

    fn flush(&self) -> std::io::Result<()> {
        let mut st = self.stage();
        // A completion is being handed out: the application may change the buffer next
        // (a GPU kernel, behind this read-ahead), so it is forgotten.
        GpuBuffer::forget_ahead(&mut st);
        Ok(self.flush_stage(&mut st)?)
    }

    fn dmabuf(&self) -> std::io::Result<std::os::fd::OwnedFd> {
        use std::os::fd::FromRawFd;
        if !self.gpu.dma_buf {
            return Err(GpuError::Unsupported(
                "the GPU does not export dma-bufs (CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED is 0: \
                 an older GPU, driver or kernel)",
            )
            .into());
        }
        self.gpu.bind()?;
        let mut fd: std::ffi::c_int = -1;
        // SAFETY: the range is the whole allocation (64 KiB-aligned size, as the call needs);
        // the driver writes one int, a new file descriptor that we own.
        unsafe {
            sys::cuMemGetHandleForAddressRange(
                (&mut fd as *mut std::ffi::c_int).cast(),
                self.ptr,
                self.size,
                sys::CUmemRangeHandleType::CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD,
                0,
            )
        }
        .result()
        .map_err(driver("cuMemGetHandleForAddressRange"))?;
        if fd < 0 {
            return Err(std::io::Error::other("cuMemGetHandleForAddressRange gave no fd"));
        }
        // SAFETY: a fresh descriptor the driver opened for this call.
        Ok(unsafe { std::os::fd::OwnedFd::from_raw_fd(fd) })
    }

    fn describe(&self) -> String {
        format!("GPU {} ({})", self.gpu.ordinal, self.gpu.pci)
    }
}

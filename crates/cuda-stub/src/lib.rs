//! A test-only stand-in for the CUDA driver library (`libcuda.so.1`): the calls podnet's
//! `gpu` crate makes, over host memory. The tests copy it as `libcuda.so.1` into a folder on
//! `LD_LIBRARY_PATH`, so that `--use_cuda` moves and validates data end to end on a machine
//! without a GPU.
//!
//! It is strict where a real driver is: a device pointer is not a host address (each is
//! offset into non-canonical space, so dereferencing one faults), copies must fall inside a
//! live allocation, and a copy needs a current context. Environment: `PODNET_CUDA_STUB_GPUS`
//! (how many GPUs, default 1), `PODNET_CUDA_STUB_PCI` (their PCI addresses, comma-separated,
//! default `0000:3c:00.0`), `PODNET_CUDA_STUB_DMABUF` (`0`: no dma-buf export),
//! `PODNET_CUDA_STUB_STATS` (a file the process appends its copy counts to as it exits:
//! `pid htod_calls htod_bytes dtoh_calls dtoh_bytes`).

use std::cell::Cell;
use std::collections::BTreeMap;
use std::ffi::{c_char, c_int, c_uint, c_void};
use std::sync::Mutex;

/// `CUresult` values the stub returns.
const SUCCESS: c_uint = 0;
const INVALID_VALUE: c_uint = 1;
const OUT_OF_MEMORY: c_uint = 2;
const INVALID_DEVICE: c_uint = 101;
const INVALID_CONTEXT: c_uint = 201;

/// Added to a host address to make a device pointer (non-canonical on x86-64).
const DISGUISE: u64 = 0x1000_0000_0000_0000;

/// Live allocations: device pointer → (host address, length); 64 KiB-aligned, as a GPU's.
static ALLOCS: Mutex<BTreeMap<u64, (usize, usize)>> = Mutex::new(BTreeMap::new());

/// Copies made: host to device (calls, bytes), device to host (calls, bytes).
static COPIES: [std::sync::atomic::AtomicU64; 4] =
    [const { std::sync::atomic::AtomicU64::new(0) }; 4];

fn count(which: usize, bytes: usize) {
    use std::sync::atomic::Ordering::Relaxed;
    COPIES[which * 2].fetch_add(1, Relaxed);
    COPIES[which * 2 + 1].fetch_add(bytes as u64, Relaxed);
}

/// Appends the copy counts to `PODNET_CUDA_STUB_STATS` (registered with atexit by cuInit).
extern "C" fn write_stats() {
    use std::io::Write as _;
    use std::sync::atomic::Ordering::Relaxed;
    let Some(path) = std::env::var_os("PODNET_CUDA_STUB_STATS") else { return };
    if let Ok(mut f) = std::fs::OpenOptions::new().create(true).append(true).open(path) {
        let c: Vec<u64> = COPIES.iter().map(|c| c.load(Relaxed)).collect();
        let _ = writeln!(f, "{} {} {} {} {}", std::process::id(), c[0], c[1], c[2], c[3]);
    }
}

thread_local! {
    /// The context current on this thread (0: none).
    static CURRENT: Cell<usize> = const { Cell::new(0) };
}

fn gpus() -> c_int {
    std::env::var("PODNET_CUDA_STUB_GPUS").ok().and_then(|v| v.parse().ok()).unwrap_or(1)
}

fn pci(dev: c_int) -> String {
    let list = std::env::var("PODNET_CUDA_STUB_PCI").unwrap_or_else(|_| "0000:3c:00.0".into());
    list.split(',').nth(dev as usize).unwrap_or("0000:3c:00.0").to_string()
}

/// Writes `s` NUL-terminated into `out` of `len` bytes.
///
/// # Safety
/// `out` must point to `len` writable bytes.
unsafe fn put_str(out: *mut c_char, len: c_int, s: &str) -> c_uint {
    if out.is_null() || len <= 0 {
        return INVALID_VALUE;
    }
    let n = s.len().min(len as usize - 1);
    // SAFETY: `out` has `len` bytes (the caller's promise) and `n + 1 <= len`.
    unsafe {
        std::ptr::copy_nonoverlapping(s.as_ptr().cast(), out, n);
        *out.add(n) = 0;
    }
    SUCCESS
}

/// The host bytes behind `[dptr, dptr + n)`, if a live allocation holds them all.
fn host_range(dptr: u64, n: usize) -> Option<*mut u8> {
    let allocs = ALLOCS.lock().ok()?;
    let (&base, &(host, len)) = allocs.range(..=dptr).next_back()?;
    let off = usize::try_from(dptr - base).ok()?;
    (off.checked_add(n)? <= len).then(|| std::ptr::with_exposed_provenance_mut::<u8>(host + off))
}

/// `cuInit`.
#[unsafe(no_mangle)]
pub extern "C" fn cuInit(_flags: c_uint) -> c_uint {
    static ONCE: std::sync::Once = std::sync::Once::new();
    if std::env::var_os("PODNET_CUDA_STUB_STATS").is_some() {
        // SAFETY: registers a plain function to run at exit, once.
        ONCE.call_once(|| unsafe {
            libc::atexit(write_stats);
        });
    }
    SUCCESS
}

/// `cuDriverGetVersion`.
///
/// # Safety
/// `v` must be writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuDriverGetVersion(v: *mut c_int) -> c_uint {
    // SAFETY: the caller's pointer.
    unsafe { *v = 12020 };
    SUCCESS
}

/// `cuDeviceGetCount`.
///
/// # Safety
/// `n` must be writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuDeviceGetCount(n: *mut c_int) -> c_uint {
    // SAFETY: the caller's pointer.
    unsafe { *n = gpus() };
    SUCCESS
}

/// `cuDeviceGet`.
///
/// # Safety
/// `dev` must be writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuDeviceGet(dev: *mut c_int, ordinal: c_int) -> c_uint {
    if !(0..gpus()).contains(&ordinal) {
        return INVALID_DEVICE;
    }
    // SAFETY: the caller's pointer.
    unsafe { *dev = ordinal };
    SUCCESS
}

/// `cuDeviceGetName`.
///
/// # Safety
/// `name` must have `len` writable bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuDeviceGetName(name: *mut c_char, len: c_int, _dev: c_int) -> c_uint {
    // SAFETY: the caller's buffer.
    unsafe { put_str(name, len, "podnet CUDA stub") }
}

/// `cuDeviceGetPCIBusId`.
///
/// # Safety
/// `bus` must have `len` writable bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuDeviceGetPCIBusId(bus: *mut c_char, len: c_int, dev: c_int) -> c_uint {
    // SAFETY: the caller's buffer.
    unsafe { put_str(bus, len, &pci(dev).to_ascii_uppercase()) }
}

/// `cuDeviceGetAttribute`: dma-buf support (124) as `PODNET_CUDA_STUB_DMABUF` says, 0 for
/// every other.
///
/// # Safety
/// `v` must be writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuDeviceGetAttribute(v: *mut c_int, attr: c_uint, _dev: c_int) -> c_uint {
    let dmabuf = std::env::var("PODNET_CUDA_STUB_DMABUF").map_or(1, |v| c_int::from(v != "0"));
    // SAFETY: the caller's pointer.
    unsafe { *v = if attr == 124 { dmabuf } else { 0 } };
    SUCCESS
}

/// `cuDevicePrimaryCtxRetain`: context `dev + 1`.
///
/// # Safety
/// `ctx` must be writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuDevicePrimaryCtxRetain(ctx: *mut *mut c_void, dev: c_int) -> c_uint {
    if !(0..gpus()).contains(&dev) {
        return INVALID_DEVICE;
    }
    // SAFETY: the caller's pointer.
    unsafe { *ctx = std::ptr::without_provenance_mut(dev as usize + 1) };
    SUCCESS
}

/// `cuDevicePrimaryCtxRelease`.
#[unsafe(no_mangle)]
pub extern "C" fn cuDevicePrimaryCtxRelease_v2(_dev: c_int) -> c_uint {
    SUCCESS
}

/// `cuCtxSetCurrent`.
#[unsafe(no_mangle)]
pub extern "C" fn cuCtxSetCurrent(ctx: *mut c_void) -> c_uint {
    CURRENT.with(|c| c.set(ctx as usize));
    SUCCESS
}

/// `cuMemAlloc`: host memory behind a device pointer.
///
/// # Safety
/// `dptr` must be writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuMemAlloc_v2(dptr: *mut u64, size: usize) -> c_uint {
    if CURRENT.with(Cell::get) == 0 {
        return INVALID_CONTEXT;
    }
    if size == 0 || size > 1 << 34 {
        return OUT_OF_MEMORY;
    }
    let mut p: *mut c_void = std::ptr::null_mut();
    // SAFETY: posix_memalign with a power-of-two alignment; freed by cuMemFree_v2.
    if unsafe { libc::posix_memalign(&mut p, 64 << 10, size) } != 0 {
        return OUT_OF_MEMORY;
    }
    // A GPU's fresh memory is not zeroed: neither is this.
    // SAFETY: `p` has `size` bytes.
    unsafe { std::ptr::write_bytes(p.cast::<u8>(), 0xa5, size) };
    let host = p.expose_provenance();
    let d = host as u64 + DISGUISE;
    let Ok(mut allocs) = ALLOCS.lock() else { return OUT_OF_MEMORY };
    allocs.insert(d, (host, size));
    // SAFETY: the caller's pointer.
    unsafe { *dptr = d };
    SUCCESS
}

/// `cuMemFree`.
#[unsafe(no_mangle)]
pub extern "C" fn cuMemFree_v2(dptr: u64) -> c_uint {
    match ALLOCS.lock().ok().and_then(|mut a| a.remove(&dptr)) {
        Some((host, _)) => {
            // SAFETY: allocated by posix_memalign in cuMemAlloc_v2, freed once (removed above).
            unsafe { libc::free(std::ptr::with_exposed_provenance_mut::<c_void>(host)) };
            SUCCESS
        }
        None => INVALID_VALUE,
    }
}

/// `cuMemHostAlloc`: plain host memory (the stub pins nothing).
///
/// # Safety
/// `pp` must be writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuMemHostAlloc(
    pp: *mut *mut c_void,
    size: usize,
    _flags: c_uint,
) -> c_uint {
    if CURRENT.with(Cell::get) == 0 {
        return INVALID_CONTEXT;
    }
    // SAFETY: a plain allocation the caller frees with cuMemFreeHost.
    let p = unsafe { libc::calloc(size.max(1), 1) };
    if p.is_null() {
        return OUT_OF_MEMORY;
    }
    // SAFETY: the caller's pointer.
    unsafe { *pp = p };
    SUCCESS
}

/// `cuMemFreeHost`.
///
/// # Safety
/// `p` must come from cuMemHostAlloc.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuMemFreeHost(p: *mut c_void) -> c_uint {
    // SAFETY: allocated by calloc in cuMemHostAlloc.
    unsafe { libc::free(p) };
    SUCCESS
}

/// `cuMemcpyHtoD`.
///
/// # Safety
/// `src` must have `n` readable bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuMemcpyHtoD_v2(dst: u64, src: *const c_void, n: usize) -> c_uint {
    if CURRENT.with(Cell::get) == 0 {
        return INVALID_CONTEXT;
    }
    let Some(d) = host_range(dst, n) else { return INVALID_VALUE };
    count(0, n);
    // SAFETY: `d` has `n` bytes inside a live allocation; `src` has `n` (the caller's).
    unsafe { std::ptr::copy_nonoverlapping(src.cast::<u8>(), d, n) };
    SUCCESS
}

/// `cuStreamCreate`: streams are numbers; the stub's copies are done when they return.
///
/// # Safety
/// `stream` must be writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuStreamCreate(stream: *mut *mut c_void, _flags: c_uint) -> c_uint {
    if CURRENT.with(Cell::get) == 0 {
        return INVALID_CONTEXT;
    }
    // SAFETY: the caller's pointer.
    unsafe { *stream = std::ptr::without_provenance_mut(0x5747) };
    SUCCESS
}

/// Asynchronous copies not yet done: (device pointer, host address, length). The stub does
/// them only when the stream is synchronized — the latest a GPU may — so that a caller who
/// reuses the source or reads the target before waiting sees the wrong bytes.
static PENDING: Mutex<Vec<(u64, usize, usize)>> = Mutex::new(Vec::new());

/// Does the pending copies.
fn drain() -> c_uint {
    let Ok(mut p) = PENDING.lock() else { return INVALID_VALUE };
    for (dst, src, n) in p.drain(..) {
        let Some(d) = host_range(dst, n) else { return INVALID_VALUE };
        // SAFETY: `d` has `n` bytes in a live allocation; `src` had `n` readable bytes when
        // the copy was asked for and the caller keeps them until it synchronizes.
        unsafe {
            std::ptr::copy_nonoverlapping(std::ptr::with_exposed_provenance::<u8>(src), d, n)
        };
    }
    SUCCESS
}

/// `cuStreamSynchronize`: the stream's copies are done.
#[unsafe(no_mangle)]
pub extern "C" fn cuStreamSynchronize(_stream: *mut c_void) -> c_uint {
    drain()
}

/// `cuStreamDestroy`.
#[unsafe(no_mangle)]
pub extern "C" fn cuStreamDestroy_v2(_stream: *mut c_void) -> c_uint {
    drain()
}

/// `cuMemcpyHtoDAsync`: queued until the stream is synchronized.
#[unsafe(no_mangle)]
pub extern "C" fn cuMemcpyHtoDAsync_v2(
    dst: u64,
    src: *const c_void,
    n: usize,
    _stream: *mut c_void,
) -> c_uint {
    if CURRENT.with(Cell::get) == 0 {
        return INVALID_CONTEXT;
    }
    if host_range(dst, n).is_none() {
        return INVALID_VALUE;
    }
    count(0, n);
    let Ok(mut p) = PENDING.lock() else { return INVALID_VALUE };
    p.push((dst, src.expose_provenance(), n));
    SUCCESS
}

/// `cuMemcpyDtoH`.
///
/// # Safety
/// `dst` must have `n` writable bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuMemcpyDtoH_v2(dst: *mut c_void, src: u64, n: usize) -> c_uint {
    if CURRENT.with(Cell::get) == 0 {
        return INVALID_CONTEXT;
    }
    let Some(s) = host_range(src, n) else { return INVALID_VALUE };
    count(1, n);
    // SAFETY: as in cuMemcpyHtoD_v2, the other way.
    unsafe { std::ptr::copy_nonoverlapping(s, dst.cast::<u8>(), n) };
    SUCCESS
}

/// `cuMemGetHandleForAddressRange` for a dma-buf: a memfd of the range's size (the stub
/// has no dma-buf; what a NIC would map is not exercised without one).
///
/// # Safety
/// `handle` must be a writable int.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuMemGetHandleForAddressRange(
    handle: *mut c_void,
    dptr: u64,
    size: usize,
    kind: c_uint,
    _flags: u64,
) -> c_uint {
    if kind != 1
        || !dptr.is_multiple_of(4096)
        || !size.is_multiple_of(4096)
        || host_range(dptr, size).is_none()
    {
        return INVALID_VALUE;
    }
    // SAFETY: a plain memfd_create with a NUL-terminated name.
    let fd = unsafe { libc::memfd_create(c"podnet-cuda-stub-dmabuf".as_ptr(), libc::MFD_CLOEXEC) };
    if fd < 0 {
        return OUT_OF_MEMORY;
    }
    // SAFETY: the caller's int.
    unsafe { *handle.cast::<c_int>() = fd };
    SUCCESS
}

/// The name of a result the stub returns.
fn name_of(code: c_uint) -> &'static std::ffi::CStr {
    match code {
        SUCCESS => c"CUDA_SUCCESS",
        INVALID_VALUE => c"CUDA_ERROR_INVALID_VALUE",
        OUT_OF_MEMORY => c"CUDA_ERROR_OUT_OF_MEMORY",
        INVALID_DEVICE => c"CUDA_ERROR_INVALID_DEVICE",
        INVALID_CONTEXT => c"CUDA_ERROR_INVALID_CONTEXT",
        _ => c"CUDA_ERROR_UNKNOWN",
    }
}

/// `cuGetErrorName`.
///
/// # Safety
/// `out` must be writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuGetErrorName(code: c_uint, out: *mut *const c_char) -> c_uint {
    // SAFETY: the caller's pointer; the names are 'static.
    unsafe { *out = name_of(code).as_ptr() };
    SUCCESS
}

/// `cuGetErrorString`.
///
/// # Safety
/// `out` must be writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuGetErrorString(code: c_uint, out: *mut *const c_char) -> c_uint {
    // SAFETY: as in cuGetErrorName.
    unsafe { cuGetErrorName(code, out) }
}

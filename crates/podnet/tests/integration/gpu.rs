//! GPU memory under `podnet perf --use_cuda`, on a machine without a GPU: against a test-only
//! stub of the CUDA driver library (`crates/cuda-stub`: the driver calls podnet makes, over
//! host memory, with device pointers that fault when dereferenced), loaded as `libcuda.so.1`
//! from `LD_LIBRARY_PATH` — so the GPU code paths themselves move and validate data end to
//! end over soft devices. And the host without CUDA: one line, exit 2, no panic.

use std::path::PathBuf;

use crate::util::{in_netns, named_skip, podnet, require_fault_injection, stderr, stdout};

/// A folder holding the stub as `libcuda.so.1`: built with cargo if the workspace build has
/// not made it yet.
fn cuda_stub() -> PathBuf {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..");
    let target =
        std::env::var_os("CARGO_TARGET_DIR").map_or_else(|| root.join("target"), PathBuf::from);
    let built = target.join("debug/libpodnet_cuda_stub.so");
    if !built.exists() {
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let ok = std::process::Command::new(cargo)
            .current_dir(&root)
            .args(["build", "-q", "-p", "podnet-cuda-stub"])
            .status()
            .expect("run cargo");
        assert!(ok.success(), "cargo build -p podnet-cuda-stub failed");
    }
    let dir = std::env::temp_dir().join(format!("podnet-cuda-stub-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::copy(&built, dir.join("libcuda.so.1")).expect("copy the stub");
    dir
}

/// On a host without the CUDA driver library, `--use_cuda` says so in one line and exits 2
/// before it listens or connects; host memory still works.
#[test]
fn use_cuda_without_cuda_says_so_and_exits_2() {
    for args in [
        &["perf", "write-bw", "--use_cuda"][..],
        &["perf", "read-bw", "--use_cuda=1", "--use_cuda_dmabuf", "127.0.0.1"][..],
    ] {
        let o = std::process::Command::new(env!("CARGO_BIN_EXE_podnet"))
            .args(args)
            .env_remove("LD_LIBRARY_PATH")
            .output()
            .unwrap();
        let err = stderr(&o);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {err}");
        assert_eq!(err.lines().count(), 1, "{args:?}: one line: {err}");
        assert!(err.contains("no CUDA driver library (libcuda.so.1) on this host"), "{err}");
        assert!(!err.contains("panicked"), "{err}");
    }
    let o = podnet(&["perf", "--use_cuda_dmabuf", "write-bw"]);
    assert_eq!(o.status.code(), Some(2), "--use_cuda_dmabuf needs --use_cuda");
}

/// `perf write-bw`, `read-bw` and `send-bw --use_cuda --data-validation` between two
/// processes over soft devices: GPU memory on both ends, then on one end only; every
/// payload checked after a copy back from the "GPU". A GPU that does not exist is named.
#[test]
fn perf_moves_and_validates_gpu_memory_through_the_stub() {
    let stub = cuda_stub();
    let o = in_netns(&format!(
        "export LD_LIBRARY_PATH={}\n\
         for t in write-bw read-bw send-bw; do for sides in both server; do\n\
           s=--use_cuda; c=--use_cuda=0; [ $sides = server ] && c=\n\
           $PODNET perf $t -n 300 -s 65536 --data-validation $s --timeout 20 > srv 2>&1 & listening\n\
           $PODNET perf $t -n 300 -s 65536 --data-validation $c --timeout 20 localhost > cli 2>&1; cr=$?\n\
           wait $!; echo \"== $t $sides rc=$cr,$?\"; grep -h 'Memory\\|Validated\\|validation\\|podnet:' cli srv\n\
         done; done\n\
         $PODNET perf write-bw --use_cuda=3 2>&1; echo \"missing rc=$?\"",
        stub.display()
    ));
    let out = stdout(&o);
    for t in ["write-bw", "read-bw", "send-bw"] {
        for sides in ["both", "server"] {
            let part = out.split(&format!("== {t} {sides} ")).nth(1).unwrap_or("");
            let part = part.split("== ").next().unwrap_or("");
            assert!(part.starts_with("rc=0,0"), "{t} {sides}: {out}{}", stderr(&o));
            let gpu_lines =
                part.matches("Memory          : GPU 0 (0000:3c:00.0) podnet CUDA stub").count();
            assert_eq!(gpu_lines, if sides == "both" { 2 } else { 1 }, "{t} {sides}: {part}");
            assert!(
                part.contains("Validated on    : the host, after a copy back from the GPU"),
                "{part}"
            );
        }
    }
    assert!(
        out.contains("GPU 3 does not exist: this host has 1 CUDA device(s)")
            && out.contains("missing rc=2"),
        "{out}"
    );
    // `devices --gpus --cuda`: the driver's view (ordinal, name, dma-buf, pinned copies)
    // joined to sysfs's by PCI address.
    let o = std::process::Command::new(env!("CARGO_BIN_EXE_podnet"))
        .args(["devices", "--gpus", "--cuda", "--json", "--sysfs-root"])
        .arg(crate::util::testdata("gpu-host/sys"))
        .env("LD_LIBRARY_PATH", &stub)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
    let c = &v[0]["cuda"];
    assert_eq!(
        (c["ordinal"].as_u64(), c["name"].as_str(), c["dma_buf"].as_bool()),
        (Some(0), Some("podnet CUDA stub"), Some(true)),
        "{v}"
    );
    assert!(c["pinned_copy_gbs"]["htod"].as_f64().is_some_and(|g| g > 0.0), "{v}");
    assert!(v[1]["cuda"].is_null(), "the second GPU is not the stub's: {v}");
    let _ = std::fs::remove_dir_all(stub);
}

/// The validation is shown to fail on GPU memory: the soft device's fault hook flips a byte
/// of every 7th payload it places into the GPU buffer, and the check of the bytes copied
/// back names the damage.
#[test]
fn damage_placed_in_gpu_memory_is_caught() {
    require_fault_injection();
    let stub = cuda_stub();
    let o = in_netns(&format!(
        "export LD_LIBRARY_PATH={} PODNET_FAULT_CORRUPT_EVERY=7\n\
         $PODNET perf write-bw -n 100 --data-validation --use_cuda --json --timeout 20 > srv 2>&1 & listening\n\
         $PODNET perf write-bw -n 100 --data-validation --use_cuda --json --timeout 20 localhost > cli 2>&1; c=$?\n\
         wait $!; echo \"rc=$c,$?\"; cat cli srv",
        stub.display()
    ));
    let out = stdout(&o);
    assert!(!out.contains("rc=0,0"), "{out}");
    assert!(out.contains("\"ok\":false") && out.contains("podnet: data validation: "), "{out}");
    assert!(!out.contains("panicked"), "{out}");
    let _ = std::fs::remove_dir_all(stub);
}

/// GPUDirect RDMA on real hardware: the rdma-core provider registers GPU memory with a NIC
/// (its dma-buf, or through nvidia_peermem) and `perf write-bw --use_cuda --data-validation`
/// runs over it on loopback. A named skip where the host lacks a GPU or a hardware NIC.
#[test]
fn rdma_core_registers_gpu_memory_with_a_real_nic() {
    let name = "gpu::rdma_core_registers_gpu_memory_with_a_real_nic";
    let gpu = std::path::Path::new("/dev/nvidia0").exists();
    // A hardware RDMA device: one whose driver is not a software one (rxe, siw).
    let nic = std::fs::read_dir("/sys/class/infiniband").ok().and_then(|d| {
        d.filter_map(|e| e.ok()).find_map(|e| {
            let drv = std::fs::read_link(e.path().join("device/driver")).ok()?;
            let drv = drv.file_name()?.to_string_lossy().into_owned();
            (!matches!(drv.as_str(), "rdma_rxe" | "siw"))
                .then(|| e.file_name().to_string_lossy().into_owned())
        })
    });
    let (true, Some(dev)) = (gpu, nic.clone()) else {
        named_skip(
            name,
            &format!(
                "GPU {}, hardware RDMA device {}",
                if gpu { "present" } else { "absent" },
                nic.as_deref().unwrap_or("absent")
            ),
        );
        return;
    };
    // On the host's own network (the NIC's address), not in a namespace.
    let o = std::process::Command::new("sh")
        .arg("-c")
        .arg(format!(
            "nd=$(cat /sys/class/infiniband/{dev}/ports/1/gid_attrs/ndevs/0)\n\
             ip=$(ip -4 -o addr show dev $nd | awk '{{print $4}}' | cut -d/ -f1 | head -1)\n\
             $PODNET perf write-bw -d {dev} -n 1000 --data-validation --use_cuda --timeout 20 > srv 2>&1 & sleep 2\n\
             $PODNET perf write-bw -d {dev} -n 1000 --data-validation --use_cuda --timeout 20 $ip > cli 2>&1; c=$?\n\
             wait $!; echo \"rc=$c,$?\"; cat cli srv; rm -f cli srv"
        ))
        .current_dir(std::env::temp_dir())
        .env("PODNET", env!("CARGO_BIN_EXE_podnet"))
        .output()
        .expect("sh runs");
    let out = stdout(&o);
    assert!(out.contains("rc=0,0") && out.contains("Memory          : GPU 0"), "{out}");
}

/// scripts/gpu-check.sh — the check a GPU host runs — runs here against the stub (short
/// runs), so that the script itself is known to work before a GPU host is at hand.
#[test]
fn the_gpu_check_script_passes_against_the_stub() {
    let stub = cuda_stub();
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../scripts/gpu-check.sh");
    let o = in_netns(&format!(
        "PODNET=$PODNET LD_LIBRARY_PATH={} DUR=1 SIZE=65536 bash {} 2>&1; echo \"rc=$?\"",
        stub.display(),
        script.display()
    ));
    let out = stdout(&o);
    assert!(out.contains("gpu-check: PASS") && out.contains("rc=0"), "{out}{}", stderr(&o));
    assert_eq!(out.matches("(client exit 0, server exit 0)").count(), 7, "{out}");
    assert!(out.contains("pinned copy GB/s"), "{out}");
    let _ = std::fs::remove_dir_all(stub);
}

/// A qualify plan puts one device's buffers in GPU memory (`gpus`): every measurement and
/// the integrity run move through the stub's "GPU", and the report's `gpu/<device>` names
/// it and where it sits; burn-in runs a rank from GPU memory beside one from host memory,
/// the KV-cache transfer among its patterns.
#[test]
fn qualify_and_burnin_run_from_gpu_memory() {
    let stub = cuda_stub();
    let plan = "name = \"gpu\"\n\
        devices = [\"soft:127.0.1.1\", \"soft:127.0.1.2\"]\n\
        gpus = { \"soft:127.0.1.1\" = 0 }\n\
        [[perf]]\ntest = \"write-bw\"\nsizes = [65536]\niters = 300\n\
        [integrity]\nseconds = 1\n";
    let o = in_netns(&format!(
        "export LD_LIBRARY_PATH={}\n\
         printf '%s' '{plan}' > plan.toml\n\
         $PODNET qualify --plan plan.toml --report-dir out > summary 2>&1; echo \"qualify rc=$?\"\n\
         echo '=== report'; cat out/report.json; echo; echo '=== burnin'\n\
         $PODNET burnin --rank 0 --world-size 2 --coordinator 127.0.9.1:29410 -d soft:127.0.9.1 --memory cuda --patterns ring,kv-cache --count 50 --sizes 65536 > b0 2>&1 &\n\
         $PODNET burnin --rank 1 --world-size 2 --coordinator 127.0.9.1:29410 -d soft:127.0.9.2 --patterns ring,kv-cache --count 50 --sizes 65536 > b1 2>&1; r1=$?\n\
         wait $!; echo \"burnin rc=$?,$r1\"; cat b0 b1\n\
         $PODNET burnin -d soft:127.0.9.1 --memory cuda:7 --rank 0 --world-size 1 --coordinator 127.0.9.1:29411 2>&1; echo \"bad gpu rc=$?\"",
        stub.display()
    ));
    let out = stdout(&o);
    assert!(out.contains("qualify rc=0"), "{out}{}", stderr(&o));
    let json =
        out.split("=== report\n").nth(1).and_then(|r| r.split("=== burnin").next()).unwrap_or("");
    let v: serde_json::Value = serde_json::from_str(json).unwrap_or_else(|e| panic!("{e}: {out}"));
    let gpu_check = v["checks"]
        .as_array()
        .and_then(|c| c.iter().find(|c| c["name"] == "gpu/soft:127.0.1.1"))
        .unwrap_or_else(|| panic!("no gpu check: {v}"));
    assert_eq!(gpu_check["status"], "pass", "{gpu_check}");
    let detail = gpu_check["detail"].as_str().unwrap_or("");
    assert!(
        detail.starts_with("GPU 0 podnet CUDA stub (0000:3c:00.0)")
            && detail.contains("no PCI function"),
        "{detail}"
    );
    assert!(out.contains("burnin rc=0,0"), "{out}");
    // The KV-cache transfer ran from the GPU-memory rank (the prefill one) too.
    assert!(
        out.lines().any(|l| l.starts_with("kv-cache/read-lat")
            && l.contains(" ok ")
            && l.contains("p99.9")),
        "{out}"
    );
    assert!(
        out.contains("--memory cuda:7: GPU 7 does not exist") && out.contains("bad gpu rc=2"),
        "{out}"
    );
    let _ = std::fs::remove_dir_all(stub);
}

/// A write-bw pair of 300 messages of 64 KiB with `server` and `client`'s flags, the stub
/// counting the copies of the side `counted` (`srv` or `cli`): its `pid htod_calls htod_bytes
/// dtoh_calls dtoh_bytes`, once every byte validated.
fn counted_copies(stub: &std::path::Path, server: &str, client: &str, counted: &str) -> Vec<u64> {
    let stats = stub.join(format!("stats-{counted}"));
    let _ = std::fs::remove_file(&stats);
    let (s_env, c_env) = if counted == "srv" {
        (stats.display().to_string(), String::new())
    } else {
        (String::new(), stats.display().to_string())
    };
    let o = in_netns(&format!(
        "export LD_LIBRARY_PATH={}\n\
         PODNET_CUDA_STUB_STATS={s_env} $PODNET perf write-bw -n 300 -s 65536 --data-validation {server} --timeout 20 > srv 2>&1 & listening\n\
         PODNET_CUDA_STUB_STATS={c_env} $PODNET perf write-bw -n 300 -s 65536 --data-validation {client} --timeout 20 localhost > cli 2>&1; c=$?\n\
         wait $!; echo \"rc=$c,$?\"; cat {counted}",
        stub.display()
    ));
    let out = stdout(&o);
    assert!(out.contains("rc=0,0") && out.contains("0 errors"), "{out}{}", stderr(&o));
    let text = std::fs::read_to_string(&stats).unwrap_or_default();
    let f: Vec<u64> = text.split_whitespace().map(|w| w.parse().unwrap()).collect();
    assert_eq!(f.len(), 5, "{text}");
    f
}

/// The soft provider gathers a message's packets for the GPU in pinned memory and copies
/// them in one go, and reads a message's packets from it ahead, in one copy: a WRITE
/// bandwidth run of 300 messages of 64 KiB (4,800 packets) into GPU memory makes far fewer
/// host-to-device copies than packets, one from GPU memory far fewer device-to-host ones
/// (the stub counts them), and every byte still validates.
#[test]
fn packets_bound_for_the_gpu_are_copied_in_batches() {
    let stub = cuda_stub();
    let f = counted_copies(&stub, "--use_cuda", "", "srv");
    // The buffer's zeroing at allocation is a few copies more.
    assert!(f[2] >= 300 * 65536, "{f:?}");
    assert!(f[1] < 300 * 16 / 4, "{} host-to-device copies for 4800 packets", f[1]);
    let f = counted_copies(&stub, "", "--use_cuda", "cli");
    assert!(f[3] < 300 * 16 / 4, "{} device-to-host copies for 4800 packets", f[3]);
    let _ = std::fs::remove_dir_all(stub);
}

/// A driver library without `cuInit` (or an older one, missing an entry point podnet calls):
/// one line naming it and exit 2, not the loader's panic.
#[test]
fn a_driver_library_missing_an_entry_point_is_named_not_a_panic() {
    let dir = tempfile::tempdir().unwrap();
    let c = dir.path().join("cuda.c");
    std::fs::write(&c, "int cuDeviceGetCount(int *n) { *n = 1; return 0; }\n").unwrap();
    let ok = std::process::Command::new("cc")
        .args(["-shared", "-fPIC", "-o"])
        .arg(dir.path().join("libcuda.so.1"))
        .arg(&c)
        .status()
        .expect("cc");
    assert!(ok.success(), "cc failed");
    let o = std::process::Command::new(env!("CARGO_BIN_EXE_podnet"))
        .args(["perf", "write-bw", "--use_cuda"])
        .env("LD_LIBRARY_PATH", dir.path())
        .output()
        .unwrap();
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert_eq!(err.lines().count(), 1, "one line: {err}");
    assert!(err.contains("has no cuInit"), "{err}");
}

//! `podnet devices`: the host's RDMA devices and soft devices in one table.

use std::io::Write;
use std::process::ExitCode;

use host::{DeviceInfo, PhysState, PortState};
use serde_json::json;
use verbs::DeviceAttr;

use crate::cli::DevicesArgs;

/// Runs `podnet devices`.
pub(crate) fn run(args: &DevicesArgs) -> anyhow::Result<ExitCode> {
    let root = &args.sysfs_root;
    super::check_sysfs_root(root)?;
    if args.gpus {
        return gpus(args);
    }
    let mut devs = host::rdma_devices(root);
    if !args.no_soft {
        devs.extend(providers::soft_devices(root)?);
    }
    if devs.is_empty() {
        // As ibv_devinfo: say so, and fail, rather than print an empty table.
        eprintln!(
            "podnet devices: no RDMA devices under {}{}",
            root.join("class/infiniband").display(),
            if args.no_soft {
                " (soft devices left out: --no-soft)"
            } else {
                " and no soft devices"
            }
        );
        return Ok(ExitCode::from(1));
    }
    let mut out = std::io::stdout().lock();
    if args.json {
        // Each device's limits, as `ibv_devinfo -v` shows them: a soft device's are the
        // provider's; an RDMA device is opened and asked (null where it cannot be).
        let limits: Vec<Option<DeviceAttr>> = devs
            .iter()
            .map(|d| match verbs::DeviceName::parse(&d.name).map(|n| n.provider_kind()) {
                Ok(verbs::ProviderKind::Soft) => Some(providers::SOFT_LIMITS),
                _ => providers::open(&d.name, &providers::ContextOptions::default())
                    .and_then(|c| c.query_device())
                    .ok(),
            })
            .collect();
        writeln!(out, "{}", serde_json::to_string_pretty(&to_json(&devs, &limits))?)?;
        return Ok(ExitCode::SUCCESS);
    }
    let dash = |s: Option<String>| s.unwrap_or_else(|| "-".into());
    let mut rows = vec![
        [
            "device",
            "provider",
            "port",
            "state",
            "physical",
            "mtu",
            "speed",
            "width",
            "link",
            "netdev",
            "firmware",
            "node guid",
        ]
        .map(String::from)
        .to_vec(),
    ];
    for d in &devs {
        for p in &d.ports {
            rows.push(vec![
                d.name.clone(),
                d.provider.clone(),
                p.port.to_string(),
                dash(p.state.map(|s| s.to_string())),
                dash(p.phys_state.map(|s| s.to_string())),
                dash(p.active_mtu.map(|m| m.to_string())),
                dash(p.speed_gbps.map(|s| format!("{s} Gb/s"))),
                dash(p.width.clone()),
                p.link_layer.to_string(),
                dash(p.netdev.clone()),
                dash(d.fw_ver.clone()),
                dash(d.node_guid.clone()),
            ]);
        }
    }
    print_table(&mut out, &rows)?;
    let g = gpu_rows(root);
    if !g.is_empty() {
        writeln!(out)?;
        print_table(&mut out, &gpu_table(&g))?;
    }
    if args.gids {
        let mut g =
            vec![["device", "port", "index", "gid", "type", "netdev"].map(String::from).to_vec()];
        for d in &devs {
            for p in &d.ports {
                for e in &p.gids {
                    g.push(vec![
                        d.name.clone(),
                        p.port.to_string(),
                        e.index.to_string(),
                        e.gid.to_ipv6().to_string(),
                        e.gid_type.to_string(),
                        dash(e.netdev.clone()),
                    ]);
                }
            }
        }
        writeln!(out)?;
        print_table(&mut out, &g)?;
    }
    Ok(ExitCode::SUCCESS)
}

fn print_table(out: &mut impl Write, rows: &[Vec<String>]) -> std::io::Result<()> {
    let cols = rows.first().map_or(0, Vec::len);
    let widths: Vec<usize> =
        (0..cols).map(|c| rows.iter().map(|r| r[c].len()).max().unwrap_or(0)).collect();
    for r in rows {
        let line: Vec<String> =
            r.iter().zip(&widths).map(|(cell, w)| format!("{cell:<w$}")).collect();
        writeln!(out, "{}", line.join("  ").trim_end())?;
    }
    Ok(())
}

fn to_json(devs: &[DeviceInfo], limits: &[Option<DeviceAttr>]) -> serde_json::Value {
    json!(
        devs.iter()
            .zip(limits)
            .map(|(d, l)| json!({
                "name": d.name,
                "provider": d.provider,
                "node_guid": d.node_guid,
                "fw_ver": d.fw_ver,
                "limits": l.map(|l| json!({
                    "max_mr_size": l.max_mr_size,
                    "max_qp": l.max_qp,
                    "max_qp_wr": l.max_qp_wr,
                    "max_sge": l.max_sge,
                    "max_cq": l.max_cq,
                    "max_cqe": l.max_cqe,
                    "max_mr": l.max_mr,
                    "max_pd": l.max_pd,
                    "max_srq": l.max_srq,
                    "max_srq_wr": l.max_srq_wr,
                    "max_inline_data": l.max_inline_data,
                })),
                "ports": d.ports.iter().map(|p| json!({
                    "port": p.port,
                    "state": p.state.map(PortState::name),
                    "phys_state": p.phys_state.map(PhysState::name),
                    "active_mtu": p.active_mtu,
                    "rate": p.rate,
                    "speed_gbps": p.speed_gbps,
                    "width": p.width,
                    "link_layer": p.link_layer.name(),
                    "netdev": p.netdev,
                    "gids": p.gids.iter().map(|g| json!({
                        "index": g.index,
                        "gid": g.gid.to_ipv6().to_string(),
                        "type": g.gid_type.name(),
                        "netdev": g.netdev,
                    })).collect::<Vec<_>>(),
                })).collect::<Vec<_>>(),
            }))
            .collect::<Vec<_>>()
    )
}

/// A GPU and the RDMA NICs by distance, nearest first.
struct GpuRow {
    gpu: host::pci::GpuFunction,
    nics: Vec<(String, host::pci::Distance)>,
}

/// The GPUs under `root`, each with every hardware RDMA device's distance to it.
fn gpu_rows(root: &std::path::Path) -> Vec<GpuRow> {
    let nics: Vec<(String, Vec<String>, Option<i64>)> = host::rdma_devices(root)
        .into_iter()
        .filter_map(|d| {
            let dev = std::path::PathBuf::from("class/infiniband").join(&d.name).join("device");
            let (path, numa) = host::pci::place_of(root, &dev);
            Some((d.name, path?, numa))
        })
        .collect();
    host::pci::gpus(root)
        .into_iter()
        .map(|gpu| {
            let mut by: Vec<(String, host::pci::Distance)> = match &gpu.path {
                Some(gp) => nics
                    .iter()
                    .map(|(n, p, numa)| {
                        (n.clone(), host::pci::distance(gp, p, gpu.numa_node, *numa))
                    })
                    .collect(),
                None => Vec::new(),
            };
            by.sort_by(|a, b| (a.1, &a.0).cmp(&(b.1, &b.0)));
            GpuRow { gpu, nics: by }
        })
        .collect()
}

fn gpu_table(rows: &[GpuRow]) -> Vec<Vec<String>> {
    let mut t = vec![
        ["gpu", "vendor", "numa", "nearest nic", "distance", "others"].map(String::from).to_vec(),
    ];
    for r in rows {
        let near = r.nics.first();
        t.push(vec![
            r.gpu.pci.clone(),
            r.gpu.vendor.into(),
            r.gpu.numa_node.map_or_else(|| "-".into(), |n| n.to_string()),
            near.map_or_else(|| "-".into(), |n| n.0.clone()),
            near.map_or_else(|| "-".into(), |n| n.1.name().into()),
            r.nics
                .iter()
                .skip(1)
                .map(|(n, d)| format!("{n} {}", d.name()))
                .collect::<Vec<_>>()
                .join(", "),
        ]);
    }
    t
}

/// What the CUDA driver says of a GPU.
struct CudaInfo {
    ordinal: u32,
    name: String,
    pci: String,
    dma_buf: bool,
    copy: gpu::CopyBandwidth,
}

impl CudaInfo {
    /// Its JSON object (`cuda` in `devices --gpus --json`).
    fn json(&self) -> serde_json::Value {
        json!({
            "ordinal": self.ordinal,
            "name": self.name,
            "dma_buf": self.dma_buf,
            "pinned_copy_gbs": {"htod": self.copy.htod_gbs, "dtoh": self.copy.dtoh_gbs},
        })
    }

    /// Its table cells: ordinal, name, dma-buf, pinned copy GB/s.
    fn cells(&self) -> [String; 4] {
        [
            self.ordinal.to_string(),
            self.name.clone(),
            if self.dma_buf { "yes" } else { "no" }.into(),
            format!("{:.1} / {:.1}", self.copy.htod_gbs, self.copy.dtoh_gbs),
        ]
    }
}

/// Every CUDA GPU, opened and measured.
fn cuda_info() -> anyhow::Result<Vec<CudaInfo>> {
    let n = gpu::Gpu::count().map_err(|e| anyhow::anyhow!("--cuda: {e}"))?;
    (0..n)
        .map(|i| {
            let g = gpu::Gpu::open(i)?;
            let copy = g.copy_bandwidth(64 << 20, 10)?;
            Ok(CudaInfo {
                ordinal: i,
                name: g.name().to_string(),
                pci: g.pci_bus_id().to_string(),
                dma_buf: g.dma_buf_supported(),
                copy,
            })
        })
        .collect::<Result<Vec<_>, gpu::GpuError>>()
        .map_err(|e| anyhow::anyhow!("--cuda: {e}"))
}

/// `podnet devices --gpus`.
fn gpus(args: &DevicesArgs) -> anyhow::Result<ExitCode> {
    let rows = gpu_rows(&args.sysfs_root);
    let cuda = if args.cuda { Some(cuda_info()?) } else { None };
    let of = |pci: &str| cuda.iter().flatten().find(|c| c.pci == pci);
    let mut out = std::io::stdout().lock();
    if args.json {
        let v: Vec<serde_json::Value> = rows
            .iter()
            .map(|r| {
                json!({
                    "pci": r.gpu.pci,
                    "vendor": r.gpu.vendor,
                    "numa_node": r.gpu.numa_node,
                    "nearest_nic": r.nics.first().map(|n| n.0.clone()),
                    "distance": r.nics.first().map(|n| n.1.name()),
                    "nics": r.nics.iter().map(|(n, d)| json!({"device": n, "distance": d.name(), "meaning": d.meaning()})).collect::<Vec<_>>(),
                    "cuda": of(&r.gpu.pci).map(CudaInfo::json),
                })
            })
            .chain(cuda.iter().flatten().filter(|c| !rows.iter().any(|r| r.gpu.pci == c.pci)).map(|c| {
                // A GPU the driver knows and this sysfs does not (another --sysfs-root).
                json!({
                    "pci": c.pci,
                    "vendor": "nvidia",
                    "numa_node": null,
                    "nearest_nic": null,
                    "distance": null,
                    "nics": [],
                    "cuda": c.json(),
                })
            }))
            .collect();
        writeln!(out, "{}", serde_json::to_string_pretty(&v)?)?;
        return Ok(ExitCode::SUCCESS);
    }
    if rows.is_empty() && cuda.as_ref().is_none_or(Vec::is_empty) {
        eprintln!(
            "podnet devices: no GPU under {}",
            args.sysfs_root.join("bus/pci/devices").display()
        );
        return Ok(ExitCode::from(1));
    }
    let mut t = gpu_table(&rows);
    if let Some(cuda) = &cuda {
        t[0].extend(
            ["cuda", "name", "dma-buf", "pinned copy GB/s (to/from GPU)"].map(String::from),
        );
        for (row, r) in t.iter_mut().skip(1).zip(&rows) {
            match of(&r.gpu.pci) {
                Some(c) => row.extend(c.cells()),
                None => row.extend(["-", "-", "-", "-"].map(String::from)),
            }
        }
        // CUDA GPUs sysfs did not show (another --sysfs-root).
        for c in cuda.iter().filter(|c| !rows.iter().any(|r| r.gpu.pci == c.pci)) {
            let mut row = [c.pci.as_str(), "nvidia", "-", "-", "-", ""].map(String::from).to_vec();
            row.extend(c.cells());
            t.push(row);
        }
    }
    print_table(&mut out, &t)?;
    Ok(ExitCode::SUCCESS)
}

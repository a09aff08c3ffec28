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
            .map(|d| match d.provider.as_str() {
                "soft" => Some(providers::SOFT_LIMITS),
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

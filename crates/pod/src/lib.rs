//! The pod watches itself: every host's agent joins a SWIM membership of the pod
//! ([`member`]), probes its peers' rails over RDMA UD QPs from rotating UDP source ports
//! ([`probe`]), shares what its probes saw with every other host, and localizes faults from
//! the pod's path matrix ([`locate`]).

pub mod agent;
pub mod cable;
pub mod channel;
pub mod flap;
pub mod locate;
pub mod member;
pub mod probe;
pub mod route;
pub mod seal;
pub mod uplink;

/// `hosts` hosts of `rails` rails on soft devices, `per` hosts under each ToR of a rail.
#[cfg(test)]
pub(crate) fn test_pod(hosts: usize, rails: usize, per: usize) -> topology::Pod {
    let hosts: Vec<serde_json::Value> = (0..hosts)
        .map(|i| {
            let rails: Vec<serde_json::Value> = (0..rails)
                .map(|r| {
                    serde_json::json!({
                        "device": format!("soft:10.{}.{i}.1", r + 1),
                        "tor": format!("rack{}-rail{r}", i / per),
                    })
                })
                .collect();
            serde_json::json!({"name": format!("h{i}"), "rails": rails})
        })
        .collect();
    serde_json::from_value(serde_json::json!({"pairs": "rail-aligned", "hosts": hosts}))
        .expect("a pod")
}

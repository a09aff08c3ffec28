//! The agent's own probe: two soft devices on loopback addresses in the agent's process, an RC
//! connection between them, and a burst of SEND ping-pongs every sampling interval. Its round
//! trips are a histogram; its devices' transport counters are ports like any other, so the
//! normalized series and the health rules apply to podnet's own RoCE stack too.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use providers::{ContextOptions, Progress};
use telemetry::prometheus_client::metrics::family::Family;
use telemetry::prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use telemetry::prometheus_client::registry::Registry;
use telemetry::sample::PortSample;
use verbs::{
    Access, CompletionQueue, Context, Path, Psn, QpInit, QpType, QueuePair, RecvWr, SendOp, SendWr,
};

struct Side {
    ctx: Context,
    cq: CompletionQueue,
    qp: QueuePair,
    mr: verbs::MemoryRegion,
}

/// The probe and what it measured.
pub(crate) struct Probe {
    sides: Mutex<(Side, Side)>,
    rtt: Family<Vec<(String, String)>, Histogram>,
    failures: telemetry::prometheus_client::metrics::counter::Counter,
}

const SIZE: usize = 64;
/// Ping-pongs per burst.
pub(crate) const BURST: usize = 32;

fn side() -> anyhow::Result<Side> {
    let opts = ContextOptions { progress: Progress::Event, ..Default::default() };
    let ctx = providers::open("soft", &opts)?;
    let pd = ctx.alloc_pd()?;
    let cq = ctx.create_cq(64, None)?;
    let mr = pd.reg_mr(2 * SIZE, Access::LOCAL_WRITE)?;
    let qp = pd.create_qp(&QpInit::new(QpType::Rc, &cq))?;
    let m = verbs::ModifyQp {
        state: Some(verbs::QpState::Init),
        access: Some(Access(0)),
        ..Default::default()
    };
    qp.modify(&m)?;
    Ok(Side { ctx, cq, qp, mr })
}

impl Probe {
    /// Opens two soft devices on the next free loopback addresses and connects them.
    pub(crate) fn start() -> anyhow::Result<Probe> {
        let (a, b) = (side()?, side()?);
        for (x, y) in [(&a, &b), (&b, &a)] {
            let path = Path::new(y.ctx.ip(), y.qp.qpn());
            x.qp.connect(&verbs::Connect::new(path, Psn::new(1), Psn::new(1)))?;
        }
        Ok(Probe {
            sides: Mutex::new((a, b)),
            rtt: Family::new_with_constructor(|| {
                Histogram::new(exponential_buckets(1e-6, 2.0, 20))
            }),
            failures: Default::default(),
        })
    }

    /// One burst of ping-pongs; each round trip goes into the histogram.
    pub(crate) fn run_burst(&self) {
        let s = self.sides.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let (a, b) = (&s.0, &s.1);
        let labels = vec![
            ("device".to_string(), a.ctx.device_name()),
            ("peer".to_string(), b.ctx.device_name()),
        ];
        let h = self.rtt.get_or_create(&labels);
        for i in 0..BURST {
            let t0 = Instant::now();
            if self.ping(a, b, i as u64).is_err() {
                self.failures.inc();
                return;
            }
            h.observe(t0.elapsed().as_secs_f64());
        }
    }

    /// a SENDs to b, b SENDs back.
    fn ping(&self, a: &Side, b: &Side, id: u64) -> anyhow::Result<()> {
        for (from, to) in [(a, b), (b, a)] {
            to.qp.post_recv(RecvWr::new(id).sge(
                to.mr.addr() + SIZE as u64,
                SIZE as u32,
                to.mr.lkey(),
            ))?;
            from.qp.post_send(SendWr::new(id, SendOp::Send).sge(
                from.mr.addr(),
                SIZE as u32,
                from.mr.lkey(),
            ))?;
            for cq in [&from.cq, &to.cq] {
                let wc = cq
                    .poll_one_blocking(Duration::from_secs(1))
                    .ok_or_else(|| anyhow::anyhow!("probe: no completion within 1 s"))?;
                anyhow::ensure!(wc.status == verbs::WcStatus::Success, "probe: {:?}", wc.status);
            }
        }
        Ok(())
    }

    /// The probe's devices as ports: their transport counters under `hw_counters`.
    pub(crate) fn ports(&self) -> Vec<PortSample> {
        let s = self.sides.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        [&s.0, &s.1]
            .iter()
            .map(|x| {
                let hw: BTreeMap<String, u64> =
                    x.ctx.counters().iter().map(|(k, v)| (k.to_string(), v)).collect();
                let pa = x.ctx.query_port();
                PortSample {
                    device: x.ctx.device_name(),
                    driver: "soft".into(),
                    info: host::PortInfo {
                        port: 1,
                        state: Some(pa.state),
                        phys_state: pa.phys_state,
                        link_layer: pa.link_layer,
                        netdev: Some("lo".into()),
                        active_mtu: Some(pa.active_mtu.bytes()),
                        gids: x.ctx.gid_table(),
                        ..host::PortInfo::default()
                    },
                    counters: BTreeMap::new(),
                    hw_counters: hw,
                }
            })
            .collect()
    }
}

impl telemetry::expose::Extra for Probe {
    fn register(&self, registry: &mut Registry) {
        registry.register(
            "podnet_probe_rtt_seconds",
            "Round trips of the agent's own probe: a 64-byte RC SEND ping-pong between two soft devices on loopback",
            self.rtt.clone(),
        );
        registry.register(
            "podnet_probe_failures",
            "Probe bursts that failed (a completion missing or in error)",
            self.failures.clone(),
        );
    }
}

//! The guest: boot, jobs, the host side of the tap, teardown.

use std::fmt::Write as _;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crate::kernel::{Kernel, cache_dir};
use crate::{Error, Result, check_host, io_err, sh};

/// The host's IPv4 address on the tap (link-local).
pub const HOST_IP4: &str = "169.254.77.1";
/// The guest's IPv4 address on its virtio NIC.
pub const GUEST_IP4: &str = "169.254.77.2";
/// The host's IPv6 address on the tap (ULA, no DAD).
pub const HOST_IP6: &str = "fd77::1";
/// The guest's IPv6 address on its virtio NIC.
pub const GUEST_IP6: &str = "fd77::2";
const TAP: &str = "rxetap0";

/// How to start the guest.
#[derive(Debug, Clone)]
pub struct Config {
    /// Guest memory in MiB.
    pub memory_mib: u32,
    /// Guest CPUs.
    pub cpus: u32,
    /// How long the guest may take to come up.
    pub boot_timeout: Duration,
}

impl Default for Config {
    fn default() -> Self {
        Config { memory_mib: 1024, cpus: 2, boot_timeout: Duration::from_secs(90) }
    }
}

/// A running guest. Dropping it powers the guest off (and kills qemu if it does not stop).
pub struct Vm {
    kernel: Kernel,
    work: PathBuf,
    ctl: PathBuf,
    qemu: Child,
    next_job: AtomicU64,
    boot_time: Duration,
}

/// What a guest job printed and how it ended.
#[derive(Debug, Clone)]
pub struct JobOutput {
    /// The job's name.
    pub name: String,
    /// Exit status (124 when `timeout` killed it).
    pub rc: i32,
    /// stdout and stderr together.
    pub output: String,
}

/// A guest job running in the background.
#[must_use = "a spawned job should be waited for"]
pub struct GuestJob<'vm> {
    vm: &'vm Vm,
    id: u64,
    name: String,
    deadline: Instant,
    secs: u64,
}

/// One rxe device in the guest.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RxeDev {
    /// The RDMA device, e.g. `rxeA`.
    pub name: String,
    /// The netdev under it.
    pub netdev: String,
    /// Its IPv4 address.
    pub ip4: String,
    /// Its IPv6 address.
    pub ip6: String,
    /// GID index of the RoCE v2 GID `::ffff:<ip4>`.
    pub gid4: u32,
    /// GID index of the RoCE v2 GID of `ip6`.
    pub gid6: u32,
}

/// The rxe devices [`Vm::setup_rxe`] creates.
#[derive(Debug, Clone)]
pub struct RxeSetup {
    /// rxe on `vA`, one end of the veth wire.
    pub a: RxeDev,
    /// rxe on `vB`, the other end.
    pub b: RxeDev,
    /// rxe on `eth0`, the virtio NIC behind the host's tap.
    pub eth: RxeDev,
}

/// The nftables table the harness owns in the guest.
pub const NFT_TABLE: &str = "podnet";

/// Shell functions every guest job can use (the harness sources this file first).
const LIB_SH: &str = r#"
# wait_tcp PORT [PID]: until something listens on TCP PORT (tcp or tcp6), up to 20 s, or
# until process PID is gone.
wait_tcp() { p=$(printf ':%04X ' "$1"); for _ in $(seq 200); do
  grep -q "$p[0-9A-F:]* 0A" /proc/net/tcp /proc/net/tcp6 2>/dev/null && return 0
  [ -n "${2:-}" ] && ! kill -0 "$2" 2>/dev/null && { echo "the server exited before listening on TCP port $1"; return 1; }
  sleep 0.1; done
  echo "nothing listens on TCP port $1"; return 1; }
# pair SERVER CLIENT [PORT]: run both, each must exit 0; prints both outputs.
pair() { srv=$1; cli=$2; port=${3:-18515}; timeout 120 sh -c "$srv" > $OUT/.srv 2>&1 & sp=$!
  wait_tcp $port $sp || { cat $OUT/.srv; kill $sp 2>/dev/null; return 1; }
  timeout 120 sh -c "$cli" > $OUT/.cli 2>&1; c=$?; wait $sp; s=$?
  echo "--- server: $srv (rc=$s)"; cat $OUT/.srv; echo "--- client: $cli (rc=$c)"; cat $OUT/.cli
  [ $c = 0 ] && [ $s = 0 ]; }
# cap_start IFACE FILE FILTER: tcpdump in the background until cap_stop. It writes to the
# guest's tmpfs (9p is too slow for tcpdump under TCG) and cap_stop copies the file to FILE.
cap_start() { mkdir -p /tmp/cap; tmp=/tmp/cap/$(basename "$2")
  tcpdump --immediate-mode -B 65536 -U -Z root -i "$1" -w "$tmp" "$3" 2>>$OUT/.tcpdump.err & CAP_PIDS="$CAP_PIDS $!"
  CAP_FILES="$CAP_FILES $tmp:$2"
  for _ in $(seq 100); do [ "$(grep -c 'listening on' $OUT/.tcpdump.err 2>/dev/null)" -ge "$(echo $CAP_PIDS | wc -w)" ] && break; sleep 0.1; done; sleep 0.3; }
# cap_stop: stop every capture started by this job and copy the files out. tcpdump's counts
# go to $OUT/.tcpdump.err; a capture that dropped packets fails.
cap_stop() { sleep 0.5; for p in $CAP_PIDS; do kill $p; wait $p 2>/dev/null; done; CAP_PIDS=
  for f in $CAP_FILES; do cp "${f%%:*}" "${f#*:}"; rm -f "${f%%:*}"; done; CAP_FILES=
  grep -E 'captured|received|dropped' $OUT/.tcpdump.err
  ! grep -qE '^[1-9][0-9]* packets dropped' $OUT/.tcpdump.err; }
# counters DEV: rxe's hw_counters as NAME VALUE lines.
counters() { for f in /sys/class/infiniband/$1/ports/1/hw_counters/*; do echo "${f##*/} $(cat $f)"; done; }
# gid_index DEV GID: the index of a RoCE v2 GID (GIDs appear asynchronously).
gid_index() { for _ in $(seq 100); do i=0; while [ $i -lt 32 ]; do
      if [ "$(cat /sys/class/infiniband/$1/ports/1/gids/$i 2>/dev/null)" = "$2" ] &&
         [ "$(cat /sys/class/infiniband/$1/ports/1/gid_attrs/types/$i 2>/dev/null)" = "RoCE v2" ]; then echo $i; return 0; fi
      i=$((i+1)); done; sleep 0.1; done; echo "no RoCE v2 GID $2 on $1" >&2; return 1; }
"#;

/// The guest's main loop: set up, say ready, then run each job file that appears.
const AGENT_SH: &str = r#"
mount -t tmpfs tmpfs /run; mkdir -p /dev/pts /dev/shm; mount -t devpts devpts /dev/pts; mount -t tmpfs tmpfs /dev/shm
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin HOME=/root
hostname rxe-guest; ip link set lo up; cd /root 2>/dev/null || cd /
# rdma_rxe is loaded by setup_rxe: at load it binds UDP port 4791 for the whole guest.
for m in virtio_net veth; do modprobe $m || echo "modprobe $m failed"; done
ip link set eth0 up && ip addr add 169.254.77.2/24 dev eth0 && ip -6 addr add fd77::2/64 dev eth0 nodad || echo "eth0 setup failed"
# The loop waits with bash's `read -t` on a FIFO nothing writes: `sleep` would fork and exec
# a process 20 times a second, which under TCG took half a vCPU from what the jobs measure.
# A look at the 9p share costs ~3 ms of vCPU there too, so while a job runs (it may be
# measuring, and wants both vCPUs) the loop looks every 0.5 s, when idle every 0.05 s.
mkfifo /run/agent.tick && exec 9<> /run/agent.tick
echo "ready uptime=$(cut -d' ' -f1 /proc/uptime) kernel=$(uname -r)" > $CTL/ready.tmp && mv $CTL/ready.tmp $CTL/ready
running=()
while :; do
  for f in $CTL/jobs/*; do
    case $f in
      */poweroff) break 2 ;;
      *.sh) id=${f##*/}; id=${id%.sh}
        mv "$f" $CTL/run/$id.sh
        ( sh $CTL/run/$id.sh > $CTL/run/$id.out 2>&1; echo $? > $CTL/run/$id.rc.tmp; mv $CTL/run/$id.rc.tmp $CTL/run/$id.rc ) < /dev/null &
        running+=($!) ;;
    esac
  done
  alive=(); for p in "${running[@]}"; do kill -0 $p 2>/dev/null && alive+=($p); done; running=("${alive[@]}")
  if [ ${#running[@]} -gt 0 ]; then t=0.5; else t=0.05; fi
  read -t $t -u 9 _ || :
done
sync; busybox poweroff -f
"#;

/// PID 1 in the initramfs: host / (9p, read-only) under a tmpfs overlay, the kernel's modules
/// and the read-write control share bound in, then the agent.
const INIT_SH: &str = r#"#!/bin/busybox sh
/bin/busybox --install -s /bin
mount -t proc proc /proc; mount -t sysfs sys /sys; mount -t devtmpfs dev /dev
fail() { echo "INITRAMFS: $*"; poweroff -f; }
for m in $(cat /mods/order); do insmod /mods/$m || fail "insmod $m"; done
for a in $(cat /proc/cmdline); do case $a in rxevm.*=*) k=${a%%=*}; k=${k#rxevm.}; eval "R_$k=\${a#*=}";; esac; done
mount -t 9p -o trans=virtio,version=9p2000.L,ro,msize=262144,cache=loose hostroot /lower || fail "9p root"
mount -t tmpfs -o size=1G tmpfs /upper && mkdir -p /upper/u /upper/w
mount -t overlay overlay -o lowerdir=/lower,upperdir=/upper/u,workdir=/upper/w /newroot || fail overlay
mkdir -p /newroot/lib/modules && mount --bind /newroot$R_kmods /newroot/lib/modules || fail modules
mkdir -p /newroot$R_ctl && mount -t 9p -o trans=virtio,version=9p2000.L,msize=262144 ctlshare /newroot$R_ctl || fail "ctl share"
for d in proc sys dev; do mount --move /$d /newroot/$d; done
echo "INITRAMFS: switching root"
exec switch_root /newroot /usr/bin/env CTL=$R_ctl /bin/bash $R_ctl/agent.sh
"#;

fn set_pdeathsig(cmd: &mut Command) {
    // SAFETY: the closure runs in the forked child before exec and only calls prctl(2), which
    // is async-signal-safe; it touches no memory shared with the parent.
    unsafe {
        cmd.pre_exec(|| {
            nix::sys::prctl::set_pdeathsig(nix::sys::signal::Signal::SIGKILL)
                .map_err(std::io::Error::from)
        });
    }
}

fn tail(path: &Path, lines: usize) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

impl Vm {
    /// Boots a guest. Create it on the thread that will own it: qemu is killed when that
    /// thread's process exits (PR_SET_PDEATHSIG).
    pub fn boot(cfg: &Config) -> Result<Vm> {
        check_host()?;
        let t0 = Instant::now();
        let kernel = Kernel::prepare()?;
        sweep_stale_runs();
        static SEQ: AtomicU64 = AtomicU64::new(0);
        let work = cache_dir().join(format!(
            "run-{}-{}",
            std::process::id(),
            SEQ.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&work);
        let ctl = work.join("ctl");
        for d in ["jobs", "run", "bodies", "out"] {
            std::fs::create_dir_all(ctl.join(d)).map_err(io_err(ctl.join(d)))?;
        }
        std::fs::write(ctl.join("agent.sh"), AGENT_SH).map_err(io_err(ctl.join("agent.sh")))?;
        std::fs::write(ctl.join("lib.sh"), LIB_SH).map_err(io_err(ctl.join("lib.sh")))?;
        let initrd = build_initramfs(&kernel, &work)?;
        let serial = work.join("serial.log");
        let ctl_abs = std::fs::canonicalize(&ctl).map_err(io_err(&ctl))?;
        let append = format!(
            "console=ttyS0 panic=-1 quiet rxevm.kmods={} rxevm.ctl={}",
            kernel.root.join("lib/modules").display(),
            ctl_abs.display()
        );
        let qemu = format!(
            "qemu-system-x86_64 -nodefaults -no-user-config -accel tcg -cpu max -smp {cpus} -m {mem} \
             -display none -monitor none -serial file:{serial} -no-reboot \
             -kernel {image} -initrd {initrd} -append '{append}' \
             -virtfs local,path=/,mount_tag=hostroot,security_model=none,readonly=on,multidevs=remap \
             -virtfs local,path={ctl},mount_tag=ctlshare,security_model=none \
             -netdev tap,id=n0,ifname={TAP},script=no,downscript=no -device virtio-net-pci,netdev=n0",
            cpus = cfg.cpus,
            mem = cfg.memory_mib,
            serial = serial.display(),
            image = kernel.image.display(),
            initrd = initrd.display(),
            ctl = ctl_abs.display(),
        );
        // A fresh, unnamed network namespace: it lives exactly as long as qemu.
        let script = format!(
            "set -e; ip link set lo up; ip tuntap add dev {TAP} mode tap; \
             ip addr add {HOST_IP4}/24 dev {TAP}; ip -6 addr add {HOST_IP6}/64 dev {TAP} nodad; \
             ip link set {TAP} up; exec {qemu}"
        );
        let log =
            std::fs::File::create(work.join("qemu.log")).map_err(io_err(work.join("qemu.log")))?;
        let mut cmd = Command::new("unshare");
        cmd.args(["--net", "--", "sh", "-c", &script])
            .stdin(Stdio::null())
            .stdout(log.try_clone().map_err(io_err(work.join("qemu.log")))?)
            .stderr(log);
        set_pdeathsig(&mut cmd);
        let qemu = cmd
            .spawn()
            .map_err(|e| Error::Command {
                cmd: "unshare … qemu".into(), detail: e.to_string()
            })?;
        let mut vm =
            Vm { kernel, work, ctl, qemu, next_job: AtomicU64::new(0), boot_time: Duration::ZERO };
        let deadline = Instant::now() + cfg.boot_timeout;
        while !vm.ctl.join("ready").exists() {
            vm.check_alive()?;
            if Instant::now() > deadline {
                return Err(Error::Boot {
                    secs: cfg.boot_timeout.as_secs(),
                    console: vm.console(),
                });
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        vm.boot_time = t0.elapsed();
        Ok(vm)
    }

    /// Time from [`Vm::boot`]'s call to the guest agent's first word (kernel preparation
    /// included).
    pub fn boot_time(&self) -> Duration {
        self.boot_time
    }

    /// What the guest agent said when it came up (uptime, kernel).
    pub fn ready_line(&self) -> String {
        std::fs::read_to_string(self.ctl.join("ready")).unwrap_or_default().trim().to_string()
    }

    /// The kernel the guest runs.
    pub fn kernel(&self) -> &Kernel {
        &self.kernel
    }

    /// A folder shared read-write with the guest, at the same path on both sides: jobs write
    /// captures and results here (`$OUT` in a job).
    pub fn out_dir(&self) -> PathBuf {
        self.ctl.join("out")
    }

    /// qemu's PID; its network namespace is the host side of the tap.
    pub fn qemu_pid(&self) -> u32 {
        self.qemu.id()
    }

    /// The tail of the guest's serial console.
    pub fn console(&self) -> String {
        let mut s = tail(&self.work.join("serial.log"), 40);
        let q = tail(&self.work.join("qemu.log"), 10);
        if !q.is_empty() {
            let _ = write!(s, "\n[qemu] {q}");
        }
        s
    }

    fn check_alive(&mut self) -> Result<()> {
        match self.qemu.try_wait() {
            Ok(Some(status)) => {
                Err(Error::QemuExited { status: status.to_string(), console: self.console() })
            }
            _ => Ok(()),
        }
    }

    /// Starts a shell job in the guest, as root, with `$OUT` set to [`Vm::out_dir`] and the
    /// harness's shell functions loaded (`pair`, `cap_start`, `cap_stop`, `counters`,
    /// `gid_index`, `wait_tcp`). It is killed after `timeout`.
    pub fn spawn(&self, name: &str, script: &str, timeout: Duration) -> Result<GuestJob<'_>> {
        let id = self.next_job.fetch_add(1, Ordering::Relaxed);
        let secs = timeout.as_secs().max(1);
        let ctl = std::fs::canonicalize(&self.ctl).map_err(io_err(&self.ctl))?;
        let body = ctl.join("bodies").join(format!("{id}.sh"));
        let full = format!(
            "OUT={out}; CTL={ctl}; CAP_PIDS=; CAP_FILES=; . $CTL/lib.sh\n{script}\n",
            out = ctl.join("out").display(),
            ctl = ctl.display()
        );
        std::fs::write(&body, full).map_err(io_err(&body))?;
        let tmp = ctl.join("jobs").join(format!(".{id}.tmp"));
        let job = format!("exec timeout -k 5 {secs} sh {}\n", body.display());
        std::fs::write(&tmp, job).map_err(io_err(&tmp))?;
        let dst = ctl.join("jobs").join(format!("{id}.sh"));
        std::fs::rename(&tmp, &dst).map_err(io_err(&dst))?;
        Ok(GuestJob {
            vm: self,
            id,
            name: name.to_string(),
            deadline: Instant::now() + timeout + Duration::from_secs(15),
            secs,
        })
    }

    /// One short, unchecked `podnet perf write-bw` (rdma-core) from `rxeB` to `rxeA` with the
    /// podnet binary at `podnet`: TCG translates rxe's code paths the first time they run, so
    /// the runs that follow do not pay for it.
    pub fn warm_up_rxe(&self, podnet: &str) {
        let p = format!("{podnet} perf write-bw --provider rdma-core -n 50");
        let script = format!("pair '{p} -d rxeA' '{p} -d rxeB 169.254.88.1'");
        let _ = self.run("warm-up", &script, Duration::from_secs(120));
    }

    /// Runs a shell job in the guest and returns its output; an exit status other than 0 is
    /// an error that carries the output.
    pub fn run(&self, name: &str, script: &str, timeout: Duration) -> Result<JobOutput> {
        let out = self.spawn(name, script, timeout)?.wait()?;
        if out.rc != 0 {
            return Err(Error::JobFailed { name: out.name, rc: out.rc, output: out.output });
        }
        Ok(out)
    }

    /// A command that runs on the host inside the guest's tap namespace (through `nsenter`),
    /// killed if this process dies.
    pub fn host_command(&self, program: &str) -> Command {
        let mut cmd = Command::new("nsenter");
        cmd.arg(format!("--net=/proc/{}/ns/net", self.qemu.id())).arg("--").arg(program);
        set_pdeathsig(&mut cmd);
        cmd
    }

    /// Runs `f` on a thread that has joined the guest's tap namespace: sockets it creates live
    /// there (and can be used from any thread afterwards).
    pub fn in_host_netns<T: Send + 'static>(
        &self,
        f: impl FnOnce() -> T + Send + 'static,
    ) -> Result<T> {
        let ns = format!("/proc/{}/ns/net", self.qemu.id());
        let file = std::fs::File::open(&ns).map_err(io_err(&ns))?;
        std::thread::spawn(move || {
            nix::sched::setns(&file, nix::sched::CloneFlags::CLONE_NEWNET).map_err(|e| {
                Error::Command { cmd: format!("setns {ns}"), detail: e.to_string() }
            })?;
            Ok(f())
        })
        .join()
        .map_err(|_| Error::Command {
            cmd: "host-namespace thread".into(),
            detail: "panicked".into(),
        })?
    }

    /// rxe's `hw_counters` of port 1 of `dev` (e.g. `rcvd_pkts`, `rcvd_seq_err`,
    /// `duplicate_request`, `retry_exceeded_err`).
    pub fn rxe_counters(&self, dev: &str) -> Result<std::collections::BTreeMap<String, u64>> {
        let out = self.run(
            &format!("counters {dev}"),
            &format!("counters {dev}"),
            Duration::from_secs(30),
        )?;
        Ok(out
            .output
            .lines()
            .filter_map(|l| {
                let (k, v) = l.split_once(' ')?;
                Some((k.to_string(), v.trim().parse().ok()?))
            })
            .collect())
    }

    /// Replaces the guest's `inet podnet` nftables table with `chains`: the body of a
    /// `table inet podnet { … }` block, e.g. a chain on the `input` hook with
    /// `iifname "vB" udp dport 4791 numgen random mod 100 < 5 drop` (5 % loss) or
    /// `udp dport 4791 limit rate over 1000/second ip ecn set ce` (ECN marks).
    pub fn nft(&self, chains: &str) -> Result<()> {
        let script = format!(
            "nft list table inet {NFT_TABLE} >/dev/null 2>&1 && nft delete table inet {NFT_TABLE}\n\
             nft -f - <<'NFT'\ntable inet {NFT_TABLE} {{\n{chains}\n}}\nNFT\nnft list table inet {NFT_TABLE}"
        );
        self.run("nft", &script, Duration::from_secs(30)).map(|_| ())
    }

    /// Removes the harness's nftables table, if any.
    pub fn nft_reset(&self) -> Result<()> {
        let script = format!(
            "nft list table inet {NFT_TABLE} >/dev/null 2>&1 && nft delete table inet {NFT_TABLE}; true"
        );
        self.run("nft reset", &script, Duration::from_secs(30)).map(|_| ())
    }

    /// Brings up rxe: a veth pair `vA`/`vB` (169.254.88.1/2, fd88::1/2) with policy routing so
    /// traffic between `rxeA` and `rxeB` crosses the veth, and `rxe_eth` on the virtio NIC
    /// `eth0` (169.254.77.2, fd77::2 from boot on) facing the host's tap. Waits for every
    /// RoCE v2 GID. Once rxe exists, the guest kernel owns UDP port 4791.
    pub fn setup_rxe(&self) -> Result<RxeSetup> {
        let out = self.run("setup rxe", SETUP_RXE_SH, Duration::from_secs(60))?;
        let mut devs = Vec::new();
        for line in out.output.lines().filter_map(|l| l.strip_prefix("RXEDEV ")) {
            let f: Vec<&str> = line.split_whitespace().collect();
            if f.len() != 6 {
                continue;
            }
            let n = |s: &str| {
                s.parse::<u32>().map_err(|_| Error::JobFailed {
                    name: "setup rxe".into(),
                    rc: 0,
                    output: out.output.clone(),
                })
            };
            devs.push(RxeDev {
                name: f[0].into(),
                netdev: f[1].into(),
                ip4: f[2].into(),
                ip6: f[3].into(),
                gid4: n(f[4])?,
                gid6: n(f[5])?,
            });
        }
        let take = |name: &str| {
            devs.iter().find(|d| d.name == name).cloned().ok_or_else(|| Error::JobFailed {
                name: "setup rxe".into(),
                rc: 0,
                output: format!("no {name} in:\n{}", out.output),
            })
        };
        Ok(RxeSetup { a: take("rxeA")?, b: take("rxeB")?, eth: take("rxe_eth")? })
    }
}

const SETUP_RXE_SH: &str = r#"
set -e
modprobe rdma_rxe; modprobe rdma_ucm
ip link add vA type veth peer name vB
ip addr add 169.254.88.1/24 dev vA; ip addr add 169.254.88.2/24 dev vB
ip -6 addr add fd88::1/64 dev vA nodad; ip -6 addr add fd88::2/64 dev vB nodad
ip link set vA up; ip link set vB up
for d in all default vA vB; do sysctl -qw net.ipv4.conf.$d.rp_filter=0 net.ipv4.conf.$d.accept_local=1; done
# Local-table lookups after our rules, so traffic from one local address to the other leaves
# through the veth instead of short-cutting through lo.
ip rule add pref 1000 lookup local; ip rule del pref 0
ip rule add pref 100 to 169.254.88.2 iif lo lookup 100; ip route add 169.254.88.2 dev vA src 169.254.88.1 table 100
ip rule add pref 101 to 169.254.88.1 iif lo lookup 101; ip route add 169.254.88.1 dev vB src 169.254.88.2 table 101
ip -6 rule add pref 1000 lookup local; ip -6 rule del pref 0
ip -6 rule add pref 100 to fd88::2 iif lo lookup 100; ip -6 route add fd88::2 dev vA src fd88::1 table 100
ip -6 rule add pref 101 to fd88::1 iif lo lookup 101; ip -6 route add fd88::1 dev vB src fd88::2 table 101
rdma link add rxeA type rxe netdev vA
rdma link add rxeB type rxe netdev vB
rdma link add rxe_eth type rxe netdev eth0
v4() { printf '0000:0000:0000:0000:0000:ffff:%02x%02x:%02x%02x' $(echo "$1" | tr . ' '); }
for d in "rxeA vA 169.254.88.1 fd88::1 fd88:0000:0000:0000:0000:0000:0000:0001" \
         "rxeB vB 169.254.88.2 fd88::2 fd88:0000:0000:0000:0000:0000:0000:0002" \
         "rxe_eth eth0 169.254.77.2 fd77::2 fd77:0000:0000:0000:0000:0000:0000:0002"; do
  set -- $d
  g4=$(gid_index $1 $(v4 $3)); g6=$(gid_index $1 $5)
  echo "RXEDEV $1 $2 $3 $4 $g4 $g6"
done
rdma link show
"#;

/// Removes the work folders (`run-<pid>-<n>`) of harness processes that no longer exist: a
/// harness killed outright cannot remove its own.
fn sweep_stale_runs() {
    let Ok(entries) = std::fs::read_dir(cache_dir()) else { return };
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        let Some(pid) = name.strip_prefix("run-").and_then(|r| r.split('-').next()) else {
            continue;
        };
        if !Path::new("/proc").join(pid).exists() {
            let _ = std::fs::remove_dir_all(e.path());
        }
    }
}

fn build_initramfs(kernel: &Kernel, work: &Path) -> Result<PathBuf> {
    let dir = work.join("initramfs");
    for d in ["bin", "proc", "sys", "dev", "mods", "lower", "upper", "newroot"] {
        std::fs::create_dir_all(dir.join(d)).map_err(io_err(dir.join(d)))?;
    }
    std::fs::copy("/bin/busybox", dir.join("bin/busybox")).map_err(io_err("/bin/busybox"))?;
    let mut order = Vec::new();
    for m in ["virtio_pci", "9pnet_virtio", "9p", "overlay"] {
        let out = sh(Command::new("modprobe").arg("-d").arg(&kernel.root).args([
            "-S",
            &kernel.version,
            "--show-depends",
            m,
        ]))?;
        for line in out.lines() {
            if let Some(path) = line.strip_prefix("insmod ") {
                let path = path.split_whitespace().next().unwrap_or("");
                let file = Path::new(path)
                    .file_name()
                    .map(|f| f.to_string_lossy().into_owned())
                    .unwrap_or_default();
                if !order.contains(&file) {
                    std::fs::copy(path, dir.join("mods").join(&file)).map_err(io_err(path))?;
                    order.push(file);
                }
            }
        }
    }
    std::fs::write(dir.join("mods/order"), order.join("\n") + "\n")
        .map_err(io_err(dir.join("mods/order")))?;
    let init = dir.join("init");
    std::fs::write(&init, INIT_SH).map_err(io_err(&init))?;
    sh(Command::new("chmod").arg("755").arg(&init))?;
    let out = work.join("initramfs.cpio.gz");
    sh(Command::new("sh").arg("-c").arg(format!(
        "cd '{}' && find . | cpio -o -H newc --quiet | gzip -1 > '{}'",
        dir.display(),
        out.display()
    )))?;
    Ok(out)
}

impl GuestJob<'_> {
    /// Whether the job has ended.
    pub fn is_finished(&self) -> bool {
        self.vm.ctl.join("run").join(format!("{}.rc", self.id)).exists()
    }

    /// Waits for the job; its output whatever its exit status (timeouts are errors).
    pub fn wait(self) -> Result<JobOutput> {
        let run = self.vm.ctl.join("run");
        let rc_file = run.join(format!("{}.rc", self.id));
        let out_file = run.join(format!("{}.out", self.id));
        loop {
            if let Ok(rc) = std::fs::read_to_string(&rc_file) {
                let output = std::fs::read_to_string(&out_file).unwrap_or_default();
                let rc = rc.trim().parse().unwrap_or(-1);
                if rc == 124 || rc == 137 {
                    return Err(Error::Timeout { name: self.name, secs: self.secs, output });
                }
                return Ok(JobOutput { name: self.name, rc, output });
            }
            if Instant::now() > self.deadline {
                let output = std::fs::read_to_string(&out_file).unwrap_or_default();
                return Err(Error::Timeout {
                    name: self.name,
                    secs: self.secs,
                    output: format!("{output}\n[guest console]\n{}", self.vm.console()),
                });
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Vm {
    fn drop(&mut self) {
        let _ = std::fs::write(self.ctl.join("jobs").join("poweroff"), b"");
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            match self.qemu.try_wait() {
                Ok(Some(_)) => break,
                _ if Instant::now() > deadline => {
                    let _ = self.qemu.kill();
                    let _ = self.qemu.wait();
                    break;
                }
                _ => std::thread::sleep(Duration::from_millis(50)),
            }
        }
        if std::env::var_os("PODNET_RXEVM_KEEP").is_none() {
            let _ = std::fs::remove_dir_all(&self.work);
        }
    }
}

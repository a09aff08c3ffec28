#!/usr/bin/env bash
# podnet perf write-bw between two soft devices on loopback, alone and while a third process
# floods the server's device with forged RC WRITE packets (random QPN, PSN and R_Key, sent
# from the client's own address, as any local user could): how much the flood costs when
# the header checks drop it, beside the same flood sent to an address with no device. Then
# the same flood aimed at the server's QP — its QPN sniffed from the traffic, as a forger
# who can capture would learn it — with random PSN and R_Key: what the PSN checks cost.
# Private network namespace, server on core 0, client on core 1,
# the flood unpinned; each figure the median of RUNS runs of SECONDS seconds.
#
#   benches/forged_flood.sh [SECONDS] [RUNS]        (root)
set -euo pipefail
cd "$(dirname "$0")/.."
SECS=${1:-3}
RUNS=${2:-3}
cargo build --release -q -p podnet
exec unshare --net bash -s "$PWD/target/release/podnet" "$SECS" "$RUNS" <<'IN'
set -euo pipefail
PODNET=$1 SECS=$2 RUNS=$3
source benches/pair.sh
netns_up
flood() { # DST [aim]: forged RC RDMA WRITE ONLY packets to DST:4791 from 127.0.0.2, as fast as Python sends
  FLOOD_DST=$1 FLOOD_AIM=${2:-} python3 - >/dev/null 2>&1 <<'PY' &
import os, socket, struct, threading, time
dst = os.environ["FLOOD_DST"]
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.bind(("127.0.0.2", 0))
aimed = [None]
def sniff():
    # The server's QPN from the client's own packets (UDP source port 4791, not ours); a new
    # pair (a new run) has new QPNs, so keep looking, a packet a tenth of a second.
    sn = socket.socket(socket.AF_PACKET, socket.SOCK_DGRAM, socket.htons(0x0800))
    sn.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sn.bind(("lo", 0))
    while True:
        p = sn.recv(256)
        ihl = (p[0] & 0xF) * 4
        if p[9] != 17 or socket.inet_ntoa(p[16:20]) != dst:
            continue
        sport, dport = struct.unpack(">HH", p[ihl:ihl + 4])
        bth = p[ihl + 8:]
        if dport == 4791 and sport == 4791 and 0x06 <= bth[0] <= 0x0B:
            aimed[0] = int.from_bytes(bth[5:8], "big")
            time.sleep(0.1)
if os.environ.get("FLOOD_AIM"):
    threading.Thread(target=sniff, daemon=True).start()
payload = bytes(1024)
while True:
    r = os.urandom(16)
    qpn = aimed[0] if os.environ.get("FLOOD_AIM") else int.from_bytes(r[0:3], "big")
    if qpn is None:
        time.sleep(0.01)
        continue
    psn = int.from_bytes(r[3:6], "big")
    bth = struct.pack(">BBHII", 0x0a, 0, 0xffff, qpn, 0x80000000 | psn)  # RC RDMA WRITE ONLY, AckReq
    reth = struct.pack(">QII", int.from_bytes(r[6:14], "big"), int.from_bytes(r[12:16], "big"), len(payload))
    s.sendto(bth + reth + payload + bytes(4), (dst, 4791))
PY
  echo $!
}
rates() { for _ in $(seq "$RUNS"); do pair "$PODNET" 4 BW_average "$SECS" write-bw -s 65536 -q 1; done | median; }
alone=$(rates)
# The control: the same flood to an address no device has (the kernel drops it), so the
# flood's own CPU and the kernel's work show apart from what the device spends on it.
f=$(flood 127.0.0.3); sleep 0.5; control=$(rates); kill "$f"
f=$(flood 127.0.0.1); sleep 0.5; flooded=$(rates); kill "$f"
f=$(flood 127.0.0.1 aim); sleep 0.5; aimed=$(rates); kill "$f"
echo "write-bw 64 KiB, IPv4 soft, median of $RUNS x ${SECS}s (MB/s): alone $alone;" \
  "flood to no device (control) $control; flood to the server's device $flooded;" \
  "flood aimed at the server's QP (sniffed QPN, random PSN and R_Key) $aimed"
IN

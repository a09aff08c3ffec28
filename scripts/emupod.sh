#!/usr/bin/env bash
# An emulated pod on one Linux host: hosts as network namespaces with R rails each, an L3
# leaf-spine fabric of router namespaces between them, as production RoCE pods are built —
# each rail's host port on a /31 to its ToR, every ToR to every spine, ECMP over the spines
# with an L4 hash (a RoCEv2 connection's UDP source port picks its path), a rate limit (tbf)
# on every fabric link so that links, not the 2 cores, set the figures. Hosts route by rail
# (a table per rail, chosen by source address; arp_ignore/arp_announce), so a dead rail's
# traffic does not silently leave by another; routers send no ICMP unreachables, so a smaller
# MTU on a link is silent loss, as on a fabric of NICs. podnet runs on soft devices bound to
# the rail addresses (`soft:10.<rail+1>.<host>.1`).
#
#   scripts/emupod.sh up NAME [HOSTS [RAILS [HOSTS_PER_TOR [SPINES [RATE [SPINE_RATE [MTU [SEED]]]]]]]]
#                                     (defaults 4 2 2 2 200mbit, SPINE_RATE = RATE x
#                                     HOSTS_PER_TOR: a ToR-spine link carries all of its
#                                     ToR's hosts, so that two flows hashed onto one spine
#                                     do not halve a pair's figure; MTU 4200, the hosts'
#                                     links' (the fabric's links take at least 4200);
#                                     SEED 1, the routers' ECMP hash seed; root.
#                                     `podnet pod shape --seed N --emupod` prints these for
#                                     a shape drawn from a seed)
#   scripts/emupod.sh down NAME        removes every namespace of the pod
#   scripts/emupod.sh hostfile NAME [RAIL]
#                                     the hosts' addresses on RAIL (default 0), one a line
#   scripts/emupod.sh exec NAME HOST CMD...   runs CMD in host HOST (0-based)
#   scripts/emupod.sh link NAME LINK rate RATE|loss PCT [both|in|out]|mtu BYTES [both|fabric]|
#                                    down|up|flap SECONDS|corrupt PCT
#       LINK: h<host>r<rail> (a host's rail to its ToR) or t<tor>s<spine> (a ToR to a spine;
#       ToR index = rack × RAILS + rail). loss: RoCE packets dropped at random (PCT to a
#       tenth of a percent) where they enter the link's router end (in: from the host, or
#       from the ToR into the spine), leave it (out), or both; flap: down and up every
#       SECONDS until `up`; corrupt: PCT of the RoCE packets crossing it get a bit flipped
#       after the RoCE headers (the UDP checksum kept right, so the receiver's ICRC check,
#       not the kernel, finds it); 0 clears. mtu fabric: the router end only (a switch port
#       set lower: the host does not know, and its large frames vanish there)
#   scripts/emupod.sh host NAME HOST freeze|thaw|kill|cpu PCT
#       a cgroup per host (v1 cpu and freezer, where mounted; else signals): freeze stops
#       every process of the host at once, cpu limits the host to PCT % of one core and runs
#       a busy loop there that takes what its own processes leave (100 or more: no limit, no
#       loop)
#   scripts/emupod.sh tor NAME TOR loss PCT
#       the ToR drops PCT % of the RoCE packets at each of its ports, in and out (nftables;
#       0 clears)
#   scripts/emupod.sh spine NAME SPINE down|up|partial PCT
#       the spine forwards nothing (a blackhole: its links stay up, so the ToRs keep hashing
#       flows onto it, as when a spine's forwarding fails under a routing protocol that has
#       not noticed), drops the RoCE packets of PCT % of the flows (by a hash of their
#       addresses and UDP source port: those flows lose everything, the others nothing), or
#       forwards again
#   scripts/emupod.sh plan NAME        the pod's [[pod.hosts]] for a `podnet qualify` plan
#   scripts/emupod.sh route NAME [SRC DST SPORT]
#       the spine a RoCE packet from address SRC to DST with UDP source port SPORT crosses
#       (the ECMP hash of SRC's ToR; a ToR-to-ToR path takes one spine each way): its
#       index, or "local" under one ToR. Without SRC DST SPORT: lines of them on stdin, an
#       answer a line ("-" under one ToR) — a qualify plan's `pod.route`
#
# Names: namespaces NAME-h<i>, NAME-t<k>, NAME-s<j>; addresses 10.<rail+1>.<host>.1/31 on
# hosts (.0 on the ToR), 172.<16+spine>.<tor>.1/31 on ToRs (.0 on the spine).
set -euo pipefail

usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//' >&2; exit 2; }
[ $# -ge 2 ] || usage
cmd=$1 name=$2
shift 2
[[ $name =~ ^[a-z][a-z0-9]{0,7}$ ]] || { echo "emupod: NAME must be 1-8 of [a-z0-9], starting with a letter" >&2; exit 2; }

# The pod's shape, kept beside it for the other commands.
state=/run/emupod/$name
nsof() { echo "$name-$1"; }
load() {
  [ -f "$state" ] || { echo "emupod: no pod $name (scripts/emupod.sh up $name)" >&2; exit 2; }
  # shellcheck disable=SC1090
  source "$state"
}

# A cgroup per host: CPU limits, freezing and killing all of a host's processes at once.
cg() { # CONTROLLER HOST: the host's cgroup folder (empty when the controller is not mounted)
  local d=/sys/fs/cgroup/$1
  [ -d "$d" ] && [ -w "$d" ] && [ -f "$d/cgroup.procs" ] && echo "$d/emupod-$name-h$2"
}
cg_up() { # HOST
  local c d cpu
  for c in cpu freezer cpuset; do d=$(cg $c "$1") && [ -n "$d" ] && mkdir -p "$d"; done
  # Every host on one CPU (EMUPOD_CPU, default the last): a packet is handed on to the
  # backlog of the CPU that sends or dequeues it, and a flow whose packets two CPUs hand on
  # (a host's threads that move, or a link's queue drained by the CPUs of two senders)
  # arrives out of order, which no fabric does — the receiver NAKs the gap and the sender
  # goes back N. On one CPU every hop keeps the order.
  d=$(cg cpuset "$1") || true
  if [ -n "$d" ] && [ -d "$d" ]; then
    cpu=${EMUPOD_CPU:-$(( $(nproc) - 1 ))}
    echo "$cpu" > "$d/cpuset.cpus"
    cat /sys/fs/cgroup/cpuset/cpuset.effective_mems > "$d/cpuset.mems"
  fi
  return 0
}
cg_down() { # HOST: thaw, kill what is left, remove
  local f c d
  f=$(cg freezer "$1") || true
  [ -n "$f" ] && [ -d "$f" ] && echo THAWED > "$f/freezer.state" 2>/dev/null || true
  for c in cpu freezer cpuset; do
    d=$(cg $c "$1") || true
    [ -n "$d" ] && [ -d "$d" ] || continue
    for p in $(cat "$d/cgroup.procs" 2>/dev/null); do kill -KILL "$p" 2>/dev/null || true; done
    for _ in 1 2 3 4 5 6 7 8 9 10; do rmdir "$d" 2>/dev/null && break; sleep 0.1; done
  done
  return 0
}

tbf() { # NS DEV RATE
  # A deep queue (1 s at the rate): a RoCE fabric is lossless (PFC pauses the sender
  # rather than drop), and RoCE has no TCP to slow down; a 20 ms queue dropped whole windows.
  # The bucket holds 10 ms at the rate (at least 64 KB): a smaller one than the rate per
  # timer tick caps the link below its rate (64 KB held a 200 Mbit/s link to ~130).
  local bits=0
  if [[ $3 =~ ^([0-9]+)(kbit|mbit|gbit)$ ]]; then
    case ${BASH_REMATCH[2]} in kbit) bits=$((BASH_REMATCH[1] * 1000)) ;; mbit) bits=$((BASH_REMATCH[1] * 1000000)) ;;
      gbit) bits=$((BASH_REMATCH[1] * 1000000000)) ;; esac
  fi
  local burst=$((bits / 8 / 100))
  [ "$burst" -ge 65536 ] || burst=65536
  ip netns exec "$1" tc qdisc replace dev "$2" root handle 1: tbf rate "$3" burst "$burst" latency 1000ms
}

permille() { # PCT: tenths of a percent (0-1000), or exit 2
  local p
  p=$(awk -v p="$1" 'BEGIN { if (p !~ /^[0-9]+(\.[0-9]+)?$/ || p + 0 > 100) exit 1; printf "%d", p * 10 + 0.5 }') \
    || { echo "emupod: PCT is 0-100, to a tenth" >&2; exit 2; }
  echo "$p"
}

flap_stop() { # LINK: ends a flapping loop on the link
  local f=$state.flap.$1
  [ -f "$f" ] || return 0
  kill "$(cat "$f")" 2>/dev/null || true
  rm -f "$f"
}

wire() { # NS_A DEV_A ADDR_A NS_B DEV_B ADDR_B RATE MTU: a veth between two namespaces, up, limited
  ip link add "$2" netns "$1" type veth peer name "$5" netns "$4"
  ip -n "$1" addr add "$3" dev "$2"
  ip -n "$4" addr add "$6" dev "$5"
  # Jumbo frames, as RoCE fabrics run them: the soft devices' path MTU is 4096 (a quarter
  # of the packets a 1500-byte fabric needs, and on 2 cores the fabric's forwarding is the
  # cost).
  ip -n "$1" link set "$2" mtu "$8" up
  ip -n "$4" link set "$5" mtu "$8" up
  # Each end knows the other's MAC from the start, as a settled fabric does: the first
  # packets of a flow do not wait for ARP at a hop (the kernel keeps only ~200 KB of them
  # meanwhile, and a RoCE burst is larger).
  local ma mb
  ma=$(ip -n "$1" -br link show "$2" | awk '{print $3}')
  mb=$(ip -n "$4" -br link show "$5" | awk '{print $3}')
  ip -n "$1" neigh replace "${6%/*}" lladdr "$mb" dev "$2" nud permanent
  ip -n "$4" neigh replace "${3%/*}" lladdr "$ma" dev "$5" nud permanent
  tbf "$1" "$2" "$7"; tbf "$4" "$5" "$7"
}

host_routes() { # HOST RAIL: the host's table for the rail, chosen by source address
  local h i=$1 r=$2; h=$(nsof h$1)
  ip -n "$h" route replace default via "10.$((r + 1)).$i.0" dev "r$r" table $((10 + r))
  ip -n "$h" route replace "10.$((r + 1)).0.0/16" via "10.$((r + 1)).$i.0" dev "r$r"
}

tor_routes() { # TOR: everything not under it, over every spine
  local t hops="" j; t=$(nsof t$1)
  for ((j = 0; j < SPINES; j++)); do
    # Only over links that are up (a spine link taken down stays out until it comes up).
    ip -n "$t" link show "s$j" | grep -q 'state UP' || continue
    hops+=" nexthop via 172.$((16 + j)).$1.0 dev s$j"
  done
  [ -n "$hops" ] || return 0
  # shellcheck disable=SC2086
  ip -n "$t" route replace 10.0.0.0/8 $hops
}

spine_routes() { # SPINE TOR: the hosts under the ToR, through it
  local s i r k=$2 rack rail; s=$(nsof s$1)
  rack=$((k / RAILS)) rail=$((k % RAILS))
  for ((i = rack * PER; i < (rack + 1) * PER && i < HOSTS; i++)); do
    ip -n "$s" route replace "10.$((rail + 1)).$i.0/31" via "172.$((16 + $1)).$k.1"
  done
}

up() {
  local hosts=${1:-4} rails=${2:-2} per=${3:-2} spines=${4:-2} rate=${5:-200mbit} srate=${6:-}
  local mtu=${7:-4200} seed=${8:-1} fmtu
  [[ $mtu =~ ^[0-9]+$ ]] && [ "$mtu" -ge 1280 ] && [ "$mtu" -le 9000 ] || { echo "emupod: MTU 1280-9000" >&2; exit 2; }
  [[ $seed =~ ^[0-9]+$ ]] && [ "$seed" -le 4294967295 ] || { echo "emupod: SEED 0-4294967295" >&2; exit 2; }
  fmtu=$(( mtu > 4200 ? mtu : 4200 ))
  if [ -z "$srate" ]; then
    [[ $rate =~ ^([0-9]+)([a-z]*)$ ]] || { echo "emupod: RATE is a number and a tc unit (200mbit)" >&2; exit 2; }
    srate=$(( ${BASH_REMATCH[1]} * per ))${BASH_REMATCH[2]}
  fi
  [ "$hosts" -ge 2 ] && [ "$hosts" -le 250 ] || { echo "emupod: 2-250 hosts" >&2; exit 2; }
  [ "$rails" -ge 1 ] && [ "$rails" -le 8 ] || { echo "emupod: 1-8 rails" >&2; exit 2; }
  [ "$per" -ge 1 ] && [ "$spines" -ge 1 ] && [ "$spines" -le 8 ] || { echo "emupod: bad shape" >&2; exit 2; }
  if ls /run/netns 2>/dev/null | grep -q "^$name-"; then
    echo "emupod: a pod named $name is up (scripts/emupod.sh down $name)" >&2; exit 2
  fi
  local racks=$(( (hosts + per - 1) / per )) tors
  tors=$((racks * rails))
  mkdir -p /run/emupod
  printf 'HOSTS=%d RAILS=%d PER=%d SPINES=%d RATE=%s SRATE=%s RACKS=%d TORS=%d MTU=%d SEED=%d\n' \
    "$hosts" "$rails" "$per" "$spines" "$rate" "$srate" "$racks" "$tors" "$mtu" "$seed" > "$state"
  load
  # Failed or interrupted half-way: take down what was made.
  trap 'down_ns; exit 130' INT TERM
  trap 'echo "emupod: setting up $name failed; taken down" >&2; down_ns; exit 1' ERR
  local i r k j ns
  for ((i = 0; i < hosts; i++)); do ip netns add "$(nsof h$i)"; cg_up "$i"; done
  for ((k = 0; k < tors; k++)); do ip netns add "$(nsof t$k)"; done
  for ((j = 0; j < spines; j++)); do ip netns add "$(nsof s$j)"; done
  for ns in $(ls /run/netns | grep "^$name-"); do
    ip -n "$ns" link set lo up
    ip netns exec "$ns" sysctl -qw net.ipv4.ip_forward=1 net.ipv4.fib_multipath_hash_policy=1 \
      net.ipv4.conf.all.arp_ignore=1 net.ipv4.conf.all.arp_announce=2 net.ipv4.conf.all.rp_filter=0 \
      net.ipv4.conf.default.rp_filter=0
    ip netns exec "$ns" sysctl -qw net.ipv4.fib_multipath_hash_seed="$seed" 2>/dev/null || true
    # No ICMP unreachables (and so no "fragmentation needed"): a fabric of NICs drops silently.
    ip netns exec "$ns" nft -f - <<'NFT'
table inet emupod {
  chain out { type filter hook output priority 0; icmp type destination-unreachable drop; icmpv6 type packet-too-big drop; }
  chain through { type filter hook forward priority 0; }
}
NFT
  done
  # Hosts to their rails' ToRs.
  for ((i = 0; i < hosts; i++)); do
    local h; h=$(nsof h$i)
    ip netns exec "$h" sysctl -qw net.ipv4.ip_forward=0
    for ((r = 0; r < rails; r++)); do
      k=$(( (i / per) * rails + r ))
      wire "$h" "r$r" "10.$((r + 1)).$i.1/31" "$(nsof t$k)" "h$i" "10.$((r + 1)).$i.0/31" "$rate" "$mtu"
      # A table per rail, chosen by source address; the rail's own subnet by default.
      ip -n "$h" rule add from "10.$((r + 1)).$i.1" table $((10 + r))
      host_routes "$i" "$r"
      # The host's link down: its packets end at its ToR, as at a ToR whose rack subnet
      # stays (not up its route to the spines, back down theirs, until their TTL ran out:
      # every probe to the host crossed the ToR's uplinks thirty times and crowded out its
      # neighbours' traffic).
      ip -n "$(nsof t$k)" route add blackhole "10.$((r + 1)).$i.0/31" metric 1000
    done
  done
  # ToRs to every spine; ECMP up, one route down per host.
  for ((k = 0; k < tors; k++)); do
    for ((j = 0; j < spines; j++)); do
      wire "$(nsof t$k)" "s$j" "172.$((16 + j)).$k.1/31" "$(nsof s$j)" "t$k" "172.$((16 + j)).$k.0/31" "$srate" "$fmtu"
    done
    tor_routes "$k"
    for ((j = 0; j < spines; j++)); do spine_routes "$j" "$k"; done
  done
  trap - INT TERM ERR
  [ -n "$(cg cpuset 0)" ] || echo "emupod: no cpuset cgroup controller here: the hosts are not on one CPU, and a flow may be reordered between CPUs (the receiver then goes back N)" >&2
  echo "emupod $name: $hosts hosts x $rails rails, $tors ToRs ($per hosts each), $spines spines, links $rate (ToR-spine $srate), MTU $mtu, ECMP seed $seed"
}

down_ns() {
  local ns i f
  for f in "$state".flap.* "$state".hog.*; do
    [ -f "$f" ] && kill "$(cat "$f")" 2>/dev/null; rm -f "$f"
  done
  for ((i = 0; i < ${HOSTS:-0}; i++)); do cg_down "$i"; done
  for ns in $(ls /run/netns 2>/dev/null | grep "^$name-" || true); do
    for p in $(ip netns pids "$ns" 2>/dev/null); do kill -KILL "$p" 2>/dev/null || true; done
    ip netns del "$ns" 2>/dev/null || true
  done
  rm -f "$state"
}

link() { # LINK OP [ARG]
  load
  local l=$1 op=$2 arg=${3:-} a b da db
  if [[ $l =~ ^h([0-9]+)r([0-9]+)$ ]]; then
    local i=${BASH_REMATCH[1]} r=${BASH_REMATCH[2]}
    [ "$i" -lt "$HOSTS" ] && [ "$r" -lt "$RAILS" ] || { echo "emupod: no link $l" >&2; exit 2; }
    a=$(nsof h$i) da=r$r b=$(nsof t$(( (i / PER) * RAILS + r ))) db=h$i
  elif [[ $l =~ ^t([0-9]+)s([0-9]+)$ ]]; then
    local k=${BASH_REMATCH[1]} j=${BASH_REMATCH[2]}
    [ "$k" -lt "$TORS" ] && [ "$j" -lt "$SPINES" ] || { echo "emupod: no link $l" >&2; exit 2; }
    a=$(nsof t$k) da=s$j b=$(nsof s$j) db=t$k
  else
    echo "emupod: LINK is h<host>r<rail> or t<tor>s<spine>, not $l" >&2; exit 2
  fi
  case $op in
    rate) tbf "$a" "$da" "$arg"; tbf "$b" "$db" "$arg" ;;
    mtu)
      # fabric: the router end only (a switch port set lower than the host or the far end:
      # large frames vanish there, as the near end does not know); both (default): either end.
      case ${4:-both} in
        both) ip -n "$a" link set "$da" mtu "$arg"; ip -n "$b" link set "$db" mtu "$arg" ;;
        fabric) ip -n "$b" link set "$db" mtu "$arg" ;;
        *) echo "emupod: mtu BYTES [both|fabric]" >&2; exit 2 ;;
      esac
      ;;
    down|down-only) # down-only: the flapping loop's, which must not stop itself
      [ "$op" = down ] && flap_stop "$l"
      ip -n "$a" link set "$da" down; ip -n "$b" link set "$db" down ;;
    flap)
      [[ $arg =~ ^[0-9]+(\.[0-9]+)?$ ]] || { echo "emupod: flap SECONDS" >&2; exit 2; }
      flap_stop "$l"
      # A loop of its own, detached: down, then up (with its routes), every SECONDS.
      setsid bash "$0" flaploop "$name" "$l" "$arg" </dev/null >/dev/null 2>&1 &
      echo $! > "$state.flap.$l"
      ;;
    corrupt)
      local pm c=corrupt_$db
      pm=$(permille "$arg")
      chain "$b" "$c"
      if [ "$pm" -gt 0 ]; then
        # A bit of the first byte after the BTH (the payload, or an ACK's AETH).
        for dir in iifname oifname; do
          ip netns exec "$b" nft add rule inet emupod "$c" "$dir" "$db" udp dport 4791 \
            numgen random mod 1000 "<" "$pm" @th,160,8 set @th,160,8 ^ 0x1 counter
        done
      fi
      ;;
    up|up-only)
      # Up again, with the routes the kernel removed when it went down (a host link: the
      # host's rail routes; a spine link: the spine's routes to the ToR's hosts).
      [ "$op" = up ] && flap_stop "$l"
      ip -n "$a" link set "$da" up; ip -n "$b" link set "$db" up
      if [[ $l =~ ^h([0-9]+)r([0-9]+)$ ]]; then
        host_routes "${BASH_REMATCH[1]}" "${BASH_REMATCH[2]}"
      else
        [[ $l =~ ^t([0-9]+)s([0-9]+)$ ]]
        tor_routes "${BASH_REMATCH[1]}"
        spine_routes "${BASH_REMATCH[2]}" "${BASH_REMATCH[1]}"
      fi
      ;;
    loss)
      # RoCE packets dropped at random where they cross the link's router end: coming in
      # from the link, going out onto it, or both.
      local pm c=loss_$db dirs
      pm=$(permille "$arg")
      case ${4:-both} in
        both) dirs="iifname oifname" ;; in) dirs=iifname ;; out) dirs=oifname ;;
        *) echo "emupod: loss PCT [both|in|out]" >&2; exit 2 ;;
      esac
      chain "$b" "$c"
      for dir in $dirs; do
        if [ "$pm" -ge 1000 ]; then
          ip netns exec "$b" nft add rule inet emupod "$c" "$dir" "$db" udp dport 4791 counter drop
        elif [ "$pm" -gt 0 ]; then
          ip netns exec "$b" nft add rule inet emupod "$c" "$dir" "$db" udp dport 4791 \
            numgen random mod 1000 "<" "$pm" counter drop
        fi
      done
      ;;
    *) echo "emupod: link OP is rate, loss, mtu, down, up, flap or corrupt" >&2; exit 2 ;;
  esac
}

chain() { # NS CHAIN: an empty chain of the emupod table that the forward chain jumps to
  if ! ip netns exec "$1" nft list chain inet emupod "$2" >/dev/null 2>&1; then
    ip netns exec "$1" nft add chain inet emupod "$2"
    ip netns exec "$1" nft add rule inet emupod through jump "$2"
  fi
  ip netns exec "$1" nft flush chain inet emupod "$2"
}

tor() { # TOR loss PCT
  load
  local k=$1 t
  [[ $k =~ ^[0-9]+$ ]] && [ "$k" -lt "$TORS" ] || { echo "emupod: no ToR $k" >&2; exit 2; }
  [ "${2:-}" = loss ] || { echo "emupod: tor NAME TOR loss PCT" >&2; exit 2; }
  local pm; pm=$(permille "${3:-}")
  t=$(nsof t$k)
  chain "$t" loss_tor
  [ "$pm" -gt 0 ] || return 0
  for dir in iifname oifname; do
    ip netns exec "$t" nft add rule inet emupod loss_tor "$dir" != lo udp dport 4791 \
      numgen random mod 1000 "<" "$pm" counter drop
  done
}

spine() { # SPINE down|up
  load
  local j=$1 s
  [[ $j =~ ^[0-9]+$ ]] && [ "$j" -lt "$SPINES" ] || { echo "emupod: no spine $j" >&2; exit 2; }
  s=$(nsof s$j)
  case ${2:-} in
    down) chain "$s" spine_down; ip netns exec "$s" nft add rule inet emupod spine_down counter drop ;;
    up) chain "$s" spine_down ;;
    partial)
      [[ ${3:-} =~ ^[0-9]+$ ]] && [ "$3" -le 100 ] || { echo "emupod: spine NAME SPINE partial PCT" >&2; exit 2; }
      chain "$s" spine_down
      ip netns exec "$s" nft add rule inet emupod spine_down udp dport 4791 \
        jhash ip saddr . ip daddr . udp sport mod 100 seed 0x5eed "<" "$3" counter drop
      ;;
    *) echo "emupod: spine NAME SPINE down|up|partial PCT" >&2; exit 2 ;;
  esac
}

case $cmd in
  up) up "$@" ;;
  tor) [ $# -ge 3 ] || usage; tor "$@" ;;
  spine) [ $# -ge 2 ] || usage; spine "$@" ;;
  down) [ -f "$state" ] && source "$state"; down_ns ;;
  plan)
    load
    for ((i = 0; i < HOSTS; i++)); do
      printf '\n[[pod.hosts]]\nname = "h%d"\nrails = [' "$i"
      for ((r = 0; r < RAILS; r++)); do
        [ "$r" -gt 0 ] && printf ', '
        printf '{ device = "soft:10.%d.%d.1", tor = "t%d" }' $((r + 1)) "$i" $(( (i / PER) * RAILS + r ))
      done
      printf ']\n'
    done
    ;;
  route)
    load
    if [ $# -eq 0 ]; then
      # Lines "SRC DST SPORT" on stdin, an answer a line: one `ip -batch` per ToR.
      mapfile -t q
      declare -A batch=() order=()
      for ((n = 0; n < ${#q[@]}; n++)); do
        read -r src dst sport <<< "${q[n]}"
        [[ $src =~ ^10\.([0-9]+)\.([0-9]+)\.1$ ]] || { echo "emupod: line $((n + 1)): SRC is a host's rail address" >&2; exit 2; }
        r=$(( BASH_REMATCH[1] - 1 )) i=${BASH_REMATCH[2]}
        [ "$r" -lt "$RAILS" ] && [ "$i" -lt "$HOSTS" ] && [[ $sport =~ ^[0-9]+$ ]] && [ -n "$dst" ] \
          || { echo "emupod: line $((n + 1)): not SRC DST SPORT of this pod" >&2; exit 2; }
        k=$(( (i / PER) * RAILS + r ))
        batch[$k]+="route get $dst from $src iif h$i ipproto udp sport $sport dport 4791"$'\n'
        order[$k]+="$n "
      done
      declare -a ans=()
      for k in "${!batch[@]}"; do
        mapfile -t got < <(printf '%s' "${batch[$k]}" | ip -n "$(nsof t$k)" -batch - | grep -v '^[[:space:]]')
        read -r -a idx <<< "${order[$k]}"
        for ((m = 0; m < ${#idx[@]}; m++)); do
          if [[ ${got[m]:-} =~ dev\ s([0-9]+) ]]; then ans[${idx[m]}]=${BASH_REMATCH[1]}; else ans[${idx[m]}]=-; fi
        done
      done
      for ((n = 0; n < ${#q[@]}; n++)); do echo "${ans[n]}"; done
      exit 0
    fi
    [ $# -eq 3 ] || usage
    [[ $1 =~ ^10\.([0-9]+)\.([0-9]+)\.1$ ]] || { echo "emupod: SRC is a host's rail address, 10.<rail+1>.<host>.1" >&2; exit 2; }
    r=$(( BASH_REMATCH[1] - 1 )) i=${BASH_REMATCH[2]}
    [ "$r" -lt "$RAILS" ] && [ "$i" -lt "$HOSTS" ] || { echo "emupod: no host address $1" >&2; exit 2; }
    [[ $3 =~ ^[0-9]+$ ]] && [ "$3" -le 65535 ] || { echo "emupod: SPORT 0-65535" >&2; exit 2; }
    k=$(( (i / PER) * RAILS + r ))
    via=$(ip -n "$(nsof t$k)" route get "$2" from "$1" iif "h$i" ipproto udp sport "$3" dport 4791 | head -1)
    if [[ $via =~ dev\ s([0-9]+) ]]; then echo "${BASH_REMATCH[1]}"; else echo local; fi
    ;;
  hostfile)
    load
    for ((i = 0; i < HOSTS; i++)); do echo "10.$((${1:-0} + 1)).$i.1"; done
    ;;
  exec)
    load
    [ $# -ge 2 ] || usage
    h=$1; shift
    [[ $h =~ ^[0-9]+$ ]] && [ "$h" -lt "$HOSTS" ] || { echo "emupod: no host $h" >&2; exit 2; }
    # Into the host's cgroups first: what runs there is the host's.
    for c in cpu freezer cpuset; do
      d=$(cg $c "$h") || true
      [ -n "$d" ] && [ -d "$d" ] && echo $$ > "$d/cgroup.procs"
    done
    exec ip netns exec "$(nsof h$h)" "$@"
    ;;
  link) [ $# -ge 2 ] || usage; link "$@" ;;
  flaploop)
    # (internal) LINK SECONDS: `link LINK flap`'s loop.
    while :; do
      sleep "$2"; bash "$0" link "$name" "$1" down-only
      sleep "$2"; bash "$0" link "$name" "$1" up-only
    done
    ;;
  host)
    load
    [ $# -ge 2 ] || usage
    [[ $1 =~ ^[0-9]+$ ]] && [ "$1" -lt "$HOSTS" ] || { echo "emupod: no host $1" >&2; exit 2; }
    f=$(cg freezer "$1") || true
    c=$(cg cpu "$1") || true
    case $2 in
      freeze|thaw)
        if [ -n "$f" ] && [ -d "$f" ]; then
          [ "$2" = freeze ] && echo FROZEN > "$f/freezer.state" || echo THAWED > "$f/freezer.state"
        else
          sig=STOP; [ "$2" = thaw ] && sig=CONT
          for p in $(ip netns pids "$(nsof h$1)"); do kill -$sig "$p"; done
        fi
        ;;
      kill)
        # Thawed first: a frozen process dies only once it runs.
        [ -n "$f" ] && [ -d "$f" ] && echo THAWED > "$f/freezer.state"
        for p in $(ip netns pids "$(nsof h$1)") $( [ -n "$f" ] && cat "$f/cgroup.procs" 2>/dev/null ); do
          kill -KILL "$p" 2>/dev/null || true
        done
        ;;
      cpu)
        [[ ${3:-} =~ ^[0-9]+$ ]] && [ "$3" -ge 1 ] || { echo "emupod: cpu PCT (of one core, 1 or more)" >&2; exit 2; }
        [ -n "$c" ] && [ -d "$c" ] || { echo "emupod: no cpu cgroup controller here" >&2; exit 2; }
        echo 100000 > "$c/cpu.cfs_period_us"
        # The host's other work: a busy loop in its cgroup takes what the limit leaves (a
        # limit alone starves nothing that needs less).
        if [ -f "$state.hog.$1" ]; then kill "$(cat "$state.hog.$1")" 2>/dev/null || true; rm -f "$state.hog.$1"; fi
        if [ "$3" -ge 100 ]; then
          echo -1 > "$c/cpu.cfs_quota_us"
        else
          echo $(( $3 * 1000 )) > "$c/cpu.cfs_quota_us"
          setsid bash "$0" exec "$name" "$1" sh -c 'while :; do :; done' </dev/null >/dev/null 2>&1 &
          echo $! > "$state.hog.$1"
        fi
        ;;
      *) usage ;;
    esac
    ;;
  *) usage ;;
esac

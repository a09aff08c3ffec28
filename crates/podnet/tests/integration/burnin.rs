//! `podnet burnin` with real processes: four ranks in four network namespaces joined by veth
//! pairs and a bridge (a ToR), every pattern; a fault injected after the ICRC caught and
//! located; a rank killed mid-run reported within the heartbeat timeout; a rank that never
//! joins named; the launch conventions of Slurm, Open MPI and torchrun; a rendezvous that a
//! silent connection, a wrong world size or a wrong secret does not disturb.

use std::time::{Duration, Instant};

use crate::util::{bridged_hosts, in_netns, stderr, stdout};

/// Splits the `== rank N rc=X` sections a script printed.
fn ranks(out: &str) -> Vec<(u32, i32, String)> {
    out.split("== rank ")
        .skip(1)
        .map(|s| {
            let (head, body) = s.split_once('\n').unwrap_or((s, ""));
            let (r, rc) = head.split_once(" rc=").unwrap();
            (r.trim().parse().unwrap(), rc.trim().parse().unwrap(), body.to_string())
        })
        .collect()
}

#[test]
fn every_pattern_across_four_namespaces_and_a_bridge() {
    let t = Instant::now();
    // Named namespaces (a switch and four hosts), created and removed by the script.
    let o = in_netns(
        "set -e\n\
         S=pnsw$$; ip netns add $S; ip -n $S link add br0 type bridge; ip -n $S link set br0 up\n\
         trap 'for i in 1 2 3 4; do ip netns del pnh$$_$i 2>/dev/null; done; ip netns del $S 2>/dev/null' EXIT\n\
         for i in 1 2 3 4; do H=pnh$$_$i; ip netns add $H\n\
           ip link add eth0 netns $H type veth peer name p$i netns $S\n\
           ip -n $S link set p$i master br0; ip -n $S link set p$i up\n\
           ip -n $H addr add 10.77.0.$i/24 dev eth0; ip -n $H link set eth0 up; ip -n $H link set lo up\n\
         done\n\
         for i in 1 2 3 4; do r=$((i-1))\n\
           ip netns exec pnh$$_$i \"$PODNET\" burnin --rank $r --world-size 4 --coordinator 10.77.0.1:29400 \
             -d soft:10.77.0.$i --duration 0.6 --sizes 4096,65536 --json > out$r.json 2> err$r.txt &\n\
         done\n\
         set +e; wait\n\
         for r in 0 1 2 3; do echo \"== rank $r rc=$(grep -c '\"ok\":true' out$r.json)\"; cat out$r.json err$r.txt; done",
    );
    let out = stdout(&o);
    let rs = ranks(&out);
    assert_eq!(rs.len(), 4, "{out}{}", stderr(&o));
    for (r, ok, body) in &rs {
        assert_eq!(*ok, 1, "rank {r} not clean:\n{body}");
        let v: serde_json::Value = serde_json::from_str(body.lines().next().unwrap()).unwrap();
        let edges = v["edges"].as_array().unwrap();
        // Each rank's ends: all-to-all 6, ring 2, pipeline 1 or 2, incast 1 or 3, bisection 2.
        let want = match r {
            0 => 6 + 2 + 1 + 3 + 2,
            3 => 6 + 2 + 1 + 1 + 2,
            _ => 6 + 2 + 2 + 1 + 2,
        };
        assert_eq!(edges.len(), want, "rank {r}: {v}");
        for e in edges {
            if e["end"] == "receiver" {
                assert!(e["messages"].as_u64().unwrap() > 10, "{e}");
                assert_eq!(e["damaged"], 0, "{e}");
            } else {
                assert!(e["mb_per_s"].as_f64().unwrap() > 0.0, "{e}");
            }
        }
        for p in ["all-to-all", "ring", "pipeline", "incast", "bisection"] {
            assert!(edges.iter().any(|e| e["pattern"] == p), "rank {r} has no {p} edge");
        }
    }
    eprintln!("4 ranks, 5 patterns: {:.1} s", t.elapsed().as_secs_f64());
}

#[test]
fn damage_after_the_icrc_is_caught_and_located() {
    crate::util::require_fault_injection();
    let o = in_netns(
        "P=\"$PODNET\"; A='--world-size 2 --coordinator 127.0.6.1:29400 --patterns ring --count 2000 --sizes 4096'\n\
         $P burnin --rank 0 -d soft:127.0.6.1 $A > o0 2> e0 & a=$!\n\
         PODNET_FAULT_CORRUPT_EVERY=97 $P burnin --rank 1 -d soft:127.0.6.2 $A > o1 2> e1 & b=$!\n\
         wait $a; ra=$?; wait $b; rb=$?\n\
         echo \"== rank 0 rc=$ra\"; cat o0 e0; echo \"== rank 1 rc=$rb\"; cat o1 e1",
    );
    let out = stdout(&o);
    let rs = ranks(&out);
    assert_eq!(rs.len(), 2, "{out}");
    // Rank 1 received the damage, says where, and fails; rank 0 fails with it.
    let (_, rc1, body1) = &rs[1];
    assert_eq!(*rc1, 1, "{body1}");
    let line =
        body1.lines().find(|l| l.contains("damaged; first:")).unwrap_or_else(|| panic!("{body1}"));
    assert!(line.contains("ring rank 0 -> rank 1"), "{line}");
    assert!(line.contains("QP 0: SEND ") && line.contains(", byte 2048 differs"), "{line}");
    assert!(body1.contains("FAULT INJECTION"), "{body1}");
    let (_, rc0, body0) = &rs[0];
    assert_eq!(*rc0, 1, "rank 0 must fail with rank 1's damage: {body0}");
    assert!(body0.contains("rank(s) 1 reported failures"), "{body0}");
}

#[test]
fn a_killed_rank_is_named_within_the_heartbeat_timeout() {
    let t0 = Instant::now();
    let o = in_netns(
        "P=\"$PODNET\"; A='--world-size 3 --coordinator 127.0.7.1:29400 --patterns all-to-all --duration 20 --sizes 4096 --heartbeat 0.2 --dead-after 1'\n\
         for r in 0 1 2; do $P burnin --rank $r -d soft:127.0.7.$((r+1)) $A --report-dir rep$r > o$r 2> e$r & eval p$r=$!; done\n\
         sleep 3; kill -9 $p2; killed=$(date +%s.%N)\n\
         wait $p0; r0=$?; t0=$(date +%s.%N); wait $p1; r1=$?; t1=$(date +%s.%N)\n\
         echo \"== rank 0 rc=$r0\"; echo \"after $(echo \"$t0 - $killed\" | bc)\"; cat e0\n\
         echo \"== rank 1 rc=$r1\"; echo \"after $(echo \"$t1 - $killed\" | bc)\"; cat e1\n\
         for r in 0 1; do echo \"=== report $r\"; tr -d '\\n' < rep$r/report.json; echo; \
           grep -c '<failure' rep$r/junit.xml; grep -c 'rank 2' rep$r/report.html; done",
    );
    let out = stdout(&o);
    // Each surviving rank still writes its reports, the lost rank a failed check in each.
    let (out, reports) = out.split_once("=== report 0\n").unwrap_or((&out, ""));
    for (r, rep) in reports.split("=== report 1\n").enumerate() {
        let mut lines = rep.lines();
        let v: serde_json::Value = serde_json::from_str(lines.next().unwrap_or(""))
            .unwrap_or_else(|e| panic!("{e}: {rep}"));
        let lost = v["checks"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["name"].as_str().is_some_and(|n| n.starts_with("burnin/rank 2 (")));
        assert_eq!(lost.map(|c| c["status"].clone()), Some("fail".into()), "rank {r}: {v}");
        assert!(v["summary"]["failed"].as_u64() >= Some(1), "rank {r}: {v}");
        let silence =
            v["checks"].as_array().unwrap().iter().find(|c| c["name"] == "burnin/heartbeat");
        assert!(silence.is_some_and(|c| c["measured"].as_f64() > Some(0.0)), "rank {r}: {v}");
        let counts: Vec<u32> = lines.map(|l| l.trim().parse().unwrap()).collect();
        assert!(
            counts.len() == 2 && counts[0] >= 1 && counts[1] >= 1,
            "rank {r}: junit failures, html mentions: {counts:?}"
        );
    }
    let rs = ranks(out);
    assert_eq!(rs.len(), 2, "{out}{}", stderr(&o));
    for (r, rc, body) in &rs {
        assert_eq!(*rc, 1, "rank {r}: {body}");
        assert!(
            body.contains("rank 2 (") && body.contains("closed its connection"),
            "rank {r}: {body}"
        );
        let after: f64 =
            body.lines().find_map(|l| l.strip_prefix("after ")).unwrap().trim().parse().unwrap();
        // Rank 0 sees the connection close at once; rank 1 hears it from rank 0.
        assert!(after < 3.0, "rank {r} stopped {after} s after the kill: {body}");
    }
    assert!(t0.elapsed() < Duration::from_secs(15), "the run was not cut short");
}

#[test]
fn a_rank_that_never_joins_is_named() {
    let o = in_netns(
        "\"$PODNET\" burnin --rank 0 --world-size 3 --coordinator 127.0.8.1:29400 -d soft:127.0.8.1 --join-timeout 1 --duration 1 --report-dir rep 2>&1 & a=$!\n\
         \"$PODNET\" burnin --rank 2 --world-size 3 --coordinator 127.0.8.1:29400 -d soft:127.0.8.3 --join-timeout 1 --duration 1 > /dev/null 2>&1\n\
         wait $a; echo rc=$?; tr -d '\\n' < rep/report.json",
    );
    let out = stdout(&o);
    assert!(out.contains("rank(s) 1 never joined within 1s (joined: [0, 2])"), "{out}");
    assert!(out.contains("rc=1"), "{out}");
    // The report says so too: a failed check, not a missing file.
    assert!(
        out.contains(r#""name": "burnin/join""#) && out.contains(r#""status": "fail""#),
        "{out}"
    );
}

#[test]
fn a_silent_connection_a_wrong_world_size_and_a_wrong_secret_do_not_disturb_the_run() {
    // Rank 0 takes its secret from the environment, rank 1 from a file. Before rank 1 comes, a
    // connection that never speaks, a rank 1 started with another world size and one with
    // another secret: those two are turned away at once (exit 2) and the run goes on.
    let o = in_netns(
        r#"printf 'pod-secret\n' > secret; printf 'not-it' > wrong
C="--coordinator 127.0.11.1:29400"; RUN="--patterns ring --count 100 --sizes 4096"
PODNET_SECRET=pod-secret "$PODNET" burnin --rank 0 --world-size 2 $C -d soft:127.0.11.1 $RUN > o0 2>&1 & a=$!
sleep 0.5; bash -c 'exec 3<>/dev/tcp/127.0.11.1/29400; sleep 60' & q=$!
sleep 0.2; s=$(date +%s%N)
"$PODNET" burnin --rank 1 --world-size 3 $C -d soft:127.0.11.2 --secret-file secret 2>&1; echo "size rc=$?"
"$PODNET" burnin --rank 1 --world-size 2 $C -d soft:127.0.11.2 --secret-file wrong 2>&1; echo "secret rc=$?"
echo "refused in $(( ($(date +%s%N) - s) / 1000000 )) ms"
"$PODNET" burnin --rank 1 --world-size 2 $C -d soft:127.0.11.2 --secret-file secret $RUN > o1 2>&1; b=$?
wait $a; echo "== rank 0 rc=$?"; cat o0; echo "== rank 1 rc=$b"; cat o1; kill $q"#,
    );
    let out = format!("{}{}", stdout(&o), stderr(&o));
    assert!(out.contains("it was started with world size 3; this run has 2"), "{out}");
    assert!(out.contains("size rc=2"), "{out}");
    assert!(out.contains("its proof of the shared secret is wrong"), "{out}");
    assert!(out.contains("secret rc=2"), "{out}");
    let ms: u64 = out
        .split("refused in ")
        .nth(1)
        .and_then(|s| s.split(' ').next())
        .and_then(|s| s.parse().ok())
        .unwrap_or(u64::MAX);
    // Two processes started, joined and turned away: not a join timeout.
    assert!(ms < 5000, "{out}");
    let rs = ranks(&out);
    assert_eq!(rs.len(), 2, "{out}");
    for (r, rc, body) in rs {
        assert_eq!(rc, 0, "rank {r}: {body}");
        assert!(body.contains(&format!("rank {r}: clean")), "rank {r}: {body}");
    }
}

#[test]
fn launch_through_slurm_open_mpi_and_torchrun_variables() {
    for (name, env0, env1) in [
        ("slurm", "SLURM_PROCID=0 SLURM_NTASKS=2", "SLURM_PROCID=1 SLURM_NTASKS=2"),
        (
            "openmpi",
            "OMPI_COMM_WORLD_RANK=0 OMPI_COMM_WORLD_SIZE=2",
            "OMPI_COMM_WORLD_RANK=1 OMPI_COMM_WORLD_SIZE=2",
        ),
        ("torchrun", "RANK=0 WORLD_SIZE=2", "RANK=1 WORLD_SIZE=2"),
    ] {
        // Slurm and Open MPI name no coordinator: --coordinator for one, MASTER_* for the other.
        let coord = if name == "slurm" { "--coordinator 127.0.9.1:29401" } else { "" };
        // A run of a count, not a duration: 500 messages each way, every one checked.
        let o = in_netns(&format!(
            "export MASTER_ADDR=127.0.9.1 MASTER_PORT=29401\n\
             env {env0} \"$PODNET\" burnin {coord} -d soft:127.0.9.1 --patterns ring --count 500 --sizes 4096 > o0 2>&1 & a=$!\n\
             env {env1} \"$PODNET\" burnin {coord} -d soft:127.0.9.2 --patterns ring --count 500 --sizes 4096 > o1 2>&1; b=$?\n\
             wait $a; echo \"== rank 0 rc=$?\"; cat o0; echo \"== rank 1 rc=$b\"; cat o1"
        ));
        let out = stdout(&o);
        let rs = ranks(&out);
        assert_eq!(rs.len(), 2, "{name}: {out}");
        for (r, rc, body) in rs {
            assert_eq!(rc, 0, "{name} rank {r}: {body}");
            assert!(body.contains(&format!("rank {r}: clean")), "{name} rank {r}: {body}");
            assert!(body.contains("receiver ok   500 messages"), "{name} rank {r}: {body}");
        }
    }
}

#[test]
fn a_hostfile_and_a_kubernetes_indexed_job_place_every_rank() {
    // Three hosts (namespaces on a bridge) run the same command with one hostfile: each
    // finds its line by its address; rank 0 is the first line's host.
    let o = in_netns(&format!(
        "set -e\n{}\
         printf '# the pod\\n10.78.0.1 slots=1\\n10.78.0.2\\n10.78.0.3\\n' > hosts\n\
         for i in 3 2 1; do\n\
           ip netns exec pkh$$_$i \"$PODNET\" burnin --hostfile hosts -d soft:10.78.0.$i \
             --patterns ring --count 200 --sizes 4096 > o$i 2>&1 &\n\
         done\n\
         set +e; wait\n\
         for i in 1 2 3; do echo \"== host $i\"; cat o$i; done\n\
         echo '== kubernetes'\n\
         export PODNET_WORLD_SIZE=2 PODNET_COORDINATOR=127.0.9.3:29402\n\
         JOB_COMPLETION_INDEX=0 \"$PODNET\" burnin -d soft:127.0.9.3 --patterns ring --count 200 --sizes 4096 > k0 2>&1 & a=$!\n\
         JOB_COMPLETION_INDEX=1 \"$PODNET\" burnin -d soft:127.0.9.4 --patterns ring --count 200 --sizes 4096 > k1 2>&1; b=$?\n\
         wait $a; echo \"k0 rc=$? k1 rc=$b\"; cat k0 k1",
        bridged_hosts("pk", "10.78.0", 3)
    ));
    let out = stdout(&o);
    let (hostfile, k8s) = out.split_once("== kubernetes").unwrap_or((&out, ""));
    for (i, rank) in [(1, 0), (2, 1), (3, 2)] {
        let part = hostfile.split(&format!("== host {i}\n")).nth(1).unwrap_or("");
        assert!(part.contains(&format!("rank {rank}: clean")), "host {i}: {out}{}", stderr(&o));
    }
    assert!(k8s.contains("k0 rc=0 k1 rc=0"), "{k8s}");
    assert!(k8s.contains("rank 0: clean") && k8s.contains("rank 1: clean"), "{k8s}");
}

#[test]
fn extreme_load_every_edge_at_once_stays_clean() {
    let o = in_netns(
        "for r in 0 1 2 3; do \"$PODNET\" burnin --rank $r --world-size 4 --coordinator 127.0.10.1:29400 \
           -d soft:127.0.10.$((r+1)) --patterns ring --extreme --duration 1 --sizes 4096,65536 --json > o$r 2> e$r & done\n\
         wait; for r in 0 1 2 3; do echo \"== rank $r rc=$(grep -c '\"ok\":true' o$r)\"; cat o$r e$r; done",
    );
    let out = stdout(&o);
    let rs = ranks(&out);
    assert_eq!(rs.len(), 4, "{out}");
    for (r, ok, body) in rs {
        assert_eq!(ok, 1, "rank {r}: {body}");
        let v: serde_json::Value = serde_json::from_str(body.lines().next().unwrap()).unwrap();
        let extreme: Vec<&serde_json::Value> =
            v["edges"].as_array().unwrap().iter().filter(|e| e["pattern"] == "extreme").collect();
        // Every pattern's edges at this rank, deduplicated: all-to-all covers them all.
        assert_eq!(extreme.len(), 6, "rank {r}: {v}");
        assert!(extreme.iter().all(|e| e["damaged"] == 0 && e["error"].is_null()), "rank {r}: {v}");
        // Heartbeats (1 s) came on time under the load: far inside --dead-after (5 s).
        let silence = v["longest_silence_ms"].as_f64().unwrap();
        assert!(silence < 2500.0, "rank {r}: silent for {silence} ms under --extreme");
    }
}

/// Under loss, RC retransmits late; a message of one size of the mix must still be received
/// (and checked) in its own run, not land in the next size's receives.
#[test]
fn a_size_mix_under_loss_stays_clean() {
    let o = in_netns(
        "printf 'table inet loss {\\n chain input {\\n  type filter hook input priority 0;\\n  udp dport 4791 numgen random mod 100 < 3 counter drop\\n }\\n}\\n' > loss.nft && nft -f loss.nft || exit 9\n\
         A='--world-size 2 --coordinator 127.0.12.1:29400 --patterns ring --duration 1.5 --sizes 4096,65536,262144 --json'\n\
         \"$PODNET\" burnin --rank 0 -d soft:127.0.12.1 $A > o0 2> e0 & a=$!\n\
         \"$PODNET\" burnin --rank 1 -d soft:127.0.12.2 $A > o1 2> e1; b=$?; wait $a; r=$?\n\
         echo \"== rank 0 rc=$r\"; cat o0 e0; echo \"== rank 1 rc=$b\"; cat o1 e1\n\
         nft list table inet loss | grep -o 'packets [0-9]*'",
    );
    let out = stdout(&o);
    let rs = ranks(&out);
    assert_eq!(rs.len(), 2, "{out}{}", stderr(&o));
    for (r, rc, body) in &rs {
        assert_eq!(*rc, 0, "rank {r}: {body}");
    }
    let dropped: u64 = out
        .lines()
        .find_map(|l| l.strip_prefix("packets "))
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or(0);
    assert!(dropped > 10, "the loss rule dropped {dropped} packets:\n{out}");
}

/// The KV-cache pattern: the prefill rank READs from and WRITEs to the decode rank (4, 16,
/// 64 KiB) while both run all-to-all SENDs: READ and WRITE latency with its tail (p50 ≤ p99
/// ≤ p99.9 per size), READ and WRITE bandwidth on 8 QPs, every byte checked at the end that
/// checks it. With damage placed at the prefill rank (its READ responses), the READ streams
/// name it and the run fails.
#[test]
fn kv_cache_reads_and_writes_under_all_to_all_with_their_tail_latency() {
    let o = in_netns(
        "P=\"$PODNET\"; A='--world-size 2 --coordinator 127.0.7.1:29400 --patterns kv-cache --count 60 --json'\n\
         $P burnin --rank 0 -d soft:127.0.7.1 $A > o0 2> e0 & a=$!\n\
         $P burnin --rank 1 -d soft:127.0.7.2 $A > o1 2> e1; rb=$?\n\
         wait $a; echo \"== rank 0 rc=$?\"; cat o0 e0; echo \"== rank 1 rc=$rb\"; cat o1 e1",
    );
    let out = stdout(&o);
    let rs = ranks(&out);
    assert_eq!(rs.len(), 2, "{out}");
    let edges = |body: &str| -> Vec<serde_json::Value> {
        let v: serde_json::Value = serde_json::from_str(body.lines().next().unwrap_or(""))
            .unwrap_or_else(|e| panic!("{e}: {body}"));
        assert_eq!(v["ok"], true, "{v}");
        v["edges"].as_array().unwrap().clone()
    };
    let prefill = edges(&rs[0].2);
    let find = |es: &[serde_json::Value], p: &str| -> serde_json::Value {
        es.iter().find(|e| e["pattern"] == p).cloned().unwrap_or_else(|| panic!("no {p}: {es:?}"))
    };
    for p in ["kv-cache/read-lat", "kv-cache/write-lat"] {
        let e = find(&prefill, p);
        let lat = e["latency"].as_array().unwrap_or_else(|| panic!("{e}"));
        let sizes: Vec<u64> = lat.iter().map(|l| l["size"].as_u64().unwrap()).collect();
        assert_eq!(sizes, [4096, 16384, 65536], "{e}");
        for l in lat {
            let (p50, p99, p999) = (
                l["p50_us"].as_f64().unwrap(),
                l["p99_us"].as_f64().unwrap(),
                l["p99_9_us"].as_f64().unwrap(),
            );
            assert!(p50 > 0.0 && p50 <= p99 && p99 <= p999, "{l}");
        }
    }
    // READs are checked at the initiator (prefill), WRITEs at the target (decode).
    assert!(find(&prefill, "kv-cache/read-bw")["messages"].as_u64().unwrap() > 0);
    assert!(find(&prefill, "kv-cache/read-bw")["mb_per_s"].as_f64().unwrap() > 0.0);
    let decode = edges(&rs[1].2);
    assert!(find(&decode, "kv-cache/write-bw")["messages"].as_u64().unwrap() > 0);
    assert!(find(&decode, "kv-cache/all-to-all")["messages"].as_u64().unwrap() > 0);
}

#[test]
fn kv_cache_damage_is_caught_where_it_is_checked() {
    crate::util::require_fault_injection();
    let o = in_netns(
        "P=\"$PODNET\"; A='--world-size 2 --coordinator 127.0.7.1:29400 --patterns kv-cache --count 40'\n\
         PODNET_FAULT_CORRUPT_EVERY=53 $P burnin --rank 0 -d soft:127.0.7.1 $A > o0 2> e0 & a=$!\n\
         $P burnin --rank 1 -d soft:127.0.7.2 $A > o1 2> e1; rb=$?\n\
         wait $a; echo \"== rank 0 rc=$?\"; cat o0 e0; echo \"== rank 1 rc=$rb\"; cat o1 e1",
    );
    let out = stdout(&o);
    let rs = ranks(&out);
    assert_eq!(rs.len(), 2, "{out}");
    let (_, rc0, body0) = &rs[0];
    assert_eq!(*rc0, 1, "{body0}");
    assert!(
        body0.lines().any(|l| l.starts_with("kv-cache/read-") && l.contains("FAIL")),
        "the READ streams are checked at the prefill rank, where the damage lands: {body0}"
    );
    assert_eq!(rs[1].1, 1, "rank 1 fails with rank 0's damage: {}", rs[1].2);
}

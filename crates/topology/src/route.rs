//! Which spine a flow crosses, as the fabric says (a plan's `pod.route`), sans-IO: the lines
//! a route command reads (`SRC DST SPORT`), the answers it writes (a spine's index, or `-`
//! where no spine is crossed), and the table of a pod's pairs' routes they make. qualify and
//! the agent's command line run the command.

use std::collections::BTreeMap;
use std::net::IpAddr;

use crate::fabric::{Dev, Pod};

/// A flow a route command is asked about: source and destination addresses, UDP source
/// port.
pub type Flow = (IpAddr, IpAddr, u16);

/// Per pair (the lower device first) and UDP source port, the spines a probe between them
/// from that port crosses: from the first device out, and from the second (its answers, from
/// the same port) back.
pub type Routes = BTreeMap<((Dev, Dev), u16), [usize; 2]>;

/// What a route command is given on its standard input: a line per flow.
pub fn request(flows: &[Flow]) -> String {
    flows.iter().map(|(a, b, p)| format!("{a} {b} {p}\n")).collect()
}

/// A route command's answers to `flows` flows, read from its standard output.
pub fn parse(text: &str, flows: usize) -> Result<Vec<Option<usize>>, String> {
    let lines: Vec<&str> = text.lines().map(str::trim).collect();
    if lines.len() != flows {
        return Err(format!("answered {} lines for {flows} flows", lines.len()));
    }
    lines
        .iter()
        .map(|l| match *l {
            "-" | "local" => Ok(None),
            n => n.parse().map(Some).map_err(|_| format!("answered {n:?}: a spine's index or `-`")),
        })
        .collect()
}

/// The flows to ask about for `pairs` of `pod` (those across ToRs, between devices with an
/// address) from each of `ports`, both ways.
pub fn flows(pod: &Pod, pairs: &[(Dev, Dev)], ports: &[u16]) -> Vec<Flow> {
    let mut out = Vec::new();
    for &(a, b) in pairs.iter().filter(|(a, b)| !pod.same_tor(*a, *b)) {
        let (Some(x), Some(y)) = (pod.rail(a).soft_ip(), pod.rail(b).soft_ip()) else { continue };
        for &p in ports {
            out.push((x, y, p));
            out.push((y, x, p));
        }
    }
    out
}

/// The routes of [`flows`]`(pod, pairs, ports)` from the command's `answers` (in their
/// order): a pair's port where both ways cross a spine.
pub fn routes(pod: &Pod, pairs: &[(Dev, Dev)], ports: &[u16], answers: &[Option<usize>]) -> Routes {
    let asked = flows(pod, pairs, ports);
    let spine: BTreeMap<Flow, usize> =
        asked.iter().zip(answers).filter_map(|(f, a)| Some((*f, (*a)?))).collect();
    let mut out = Routes::new();
    for &(a, b) in pairs.iter().filter(|(a, b)| !pod.same_tor(*a, *b)) {
        let (a, b) = if a <= b { (a, b) } else { (b, a) };
        let (Some(x), Some(y)) = (pod.rail(a).soft_ip(), pod.rail(b).soft_ip()) else { continue };
        for &p in ports {
            if let (Some(f), Some(r)) = (spine.get(&(x, y, p)), spine.get(&(y, x, p))) {
                out.insert(((a, b), p), [*f, *r]);
            }
        }
    }
    out
}

/// Source ports for `flows` (data from the first device to the second), `qps` a flow, so
/// that the QPs leaving each ToR, and those arriving at each, cross the spines as evenly as
/// the known `routes` of `ports` allow: a test of the fabric's capacity then measures the
/// fabric, not how its ECMP hash fell. QP by QP in turn over the flows, each takes the port
/// whose spine is least loaded at both its ToRs (the lowest port of the list's order among
/// equals). A flow under one ToR, or with no known route, gets none (its QPs' own hashes).
pub fn spread(
    pod: &Pod,
    flows: &[(Dev, Dev)],
    qps: usize,
    ports: &[u16],
    routes: &Routes,
) -> Vec<Vec<u16>> {
    let mut out_of: BTreeMap<(&str, usize), usize> = BTreeMap::new();
    let mut into: BTreeMap<(&str, usize), usize> = BTreeMap::new();
    let mut chosen: Vec<Vec<u16>> = vec![Vec::new(); flows.len()];
    for _ in 0..qps {
        for (i, &(a, b)) in flows.iter().enumerate() {
            if pod.same_tor(a, b) {
                continue;
            }
            let (from, to) = (pod.rail(a).tor.as_str(), pod.rail(b).tor.as_str());
            let key = if a <= b { (a, b) } else { (b, a) };
            let best = ports
                .iter()
                .enumerate()
                .filter(|(_, p)| !chosen[i].contains(p))
                .filter_map(|(k, p)| {
                    let [f, r] = routes.get(&(key, *p))?;
                    let spine = if key.0 == a { *f } else { *r };
                    let (o, n) = (out_of.get(&(from, spine)), into.get(&(to, spine)));
                    let (o, n) = (o.copied().unwrap_or(0), n.copied().unwrap_or(0));
                    Some(((o.max(n), o + n, k), *p, spine))
                })
                .min();
            if let Some((_, p, spine)) = best {
                chosen[i].push(p);
                *out_of.entry((from, spine)).or_default() += 1;
                *into.entry((to, spine)).or_default() += 1;
            }
        }
    }
    chosen
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_are_read_back_a_line_a_flow() {
        let ip = |s: &str| s.parse::<IpAddr>().unwrap();
        let f = [(ip("10.1.0.1"), ip("10.1.2.1"), 49159)];
        assert_eq!(request(&f), "10.1.0.1 10.1.2.1 49159\n");
        assert_eq!(parse("2\n", 1), Ok(vec![Some(2)]));
        assert_eq!(parse(" - \n", 1), Ok(vec![None]));
        assert_eq!(parse("1\n2\n", 1), Err("answered 2 lines for 1 flows".into()));
        assert!(parse("spine-a\n", 1).unwrap_err().contains("a spine's index"));
    }

    #[test]
    fn a_tests_qps_spread_over_the_spines_however_the_hash_leans() {
        use crate::shape::{Shape, Uplink};
        let shape = Shape {
            seed: 0,
            racks: 4,
            hosts_per_tor: 2,
            rails: 2,
            spines: 3,
            uplink: Uplink::OneToOne,
            host_mbit: 100,
            mtu: 1500,
            ecmp_seed: 0,
        };
        let pod = shape.pod();
        let flows = crate::bisection(&pod);
        let ports: Vec<u16> = (0..16).map(|k| 0xC000 + k).collect();
        // The hash leans: ten ports of each pair cross spine 0 out; back, every one spine 0.
        let lean = |k: usize| [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 2, 2, 2][k];
        let mut routes = Routes::new();
        for &(a, b) in flows.iter().skip(1) {
            for (k, p) in ports.iter().enumerate() {
                routes.insert(((a, b), *p), [lean(k), 0]);
            }
        }
        let qps = 4;
        let got = spread(&pod, &flows, qps, &ports, &routes);
        assert_eq!(got[0], Vec::<u16>::new(), "a flow of no known route: its own hashes");
        let mut out_of: BTreeMap<(&str, usize), usize> = BTreeMap::new();
        let mut into: BTreeMap<(&str, usize), usize> = BTreeMap::new();
        for (&(a, b), p) in flows.iter().zip(&got).skip(1) {
            assert_eq!(p.len(), qps, "{a:?} -> {b:?}: {p:?}");
            let distinct: std::collections::BTreeSet<&u16> = p.iter().collect();
            assert_eq!(distinct.len(), qps, "a port a QP: {p:?}");
            for port in p {
                let spine = routes[&((a, b), *port)][0];
                *out_of.entry((pod.rail(a).tor.as_str(), spine)).or_default() += 1;
                *into.entry((pod.rail(b).tor.as_str(), spine)).or_default() += 1;
            }
        }
        for (what, load) in [("out of", &out_of), ("into", &into)] {
            let tors: std::collections::BTreeSet<&str> = load.keys().map(|k| k.0).collect();
            for tor in tors {
                let per: Vec<usize> =
                    (0..3).map(|s| load.get(&(tor, s)).copied().unwrap_or(0)).collect();
                let (lo, hi) = (per.iter().min().unwrap(), per.iter().max().unwrap());
                assert!(hi - lo <= 1, "{what} {tor}: QPs per spine {per:?}");
            }
        }
    }
}

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
}

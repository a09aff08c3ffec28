//! ethtool statistics from the kernel (`SIOCETHTOOL`: `ETHTOOL_GSSET_INFO`, `ETHTOOL_GSTRINGS`,
//! `ETHTOOL_GSTATS`), what `ethtool -S` prints.

use std::io;

const SIOCETHTOOL: libc::c_ulong = 0x8946;
const ETHTOOL_GSTRINGS: u32 = 0x1b;
const ETHTOOL_GSTATS: u32 = 0x1d;
const ETHTOOL_GSSET_INFO: u32 = 0x37;
const ETH_SS_STATS: u32 = 1;
const ETH_GSTRING_LEN: usize = 32;

#[repr(C)]
struct IfReq {
    name: [libc::c_char; libc::IFNAMSIZ],
    data: *mut libc::c_void,
    _pad: [u8; 16],
}

fn ioctl(fd: libc::c_int, ifname: &str, data: &mut [u64]) -> io::Result<()> {
    let mut req =
        IfReq { name: [0; libc::IFNAMSIZ], data: data.as_mut_ptr().cast(), _pad: [0; 16] };
    if ifname.len() >= libc::IFNAMSIZ {
        return Err(io::Error::from_raw_os_error(libc::EINVAL));
    }
    for (d, s) in req.name.iter_mut().zip(ifname.bytes()) {
        *d = s as libc::c_char;
    }
    // SAFETY: `req` names a buffer (`data`) that is large enough for the command written at
    // its start (each caller sizes it), and lives across the call.
    let rc = unsafe { libc::ioctl(fd, SIOCETHTOOL as _, &mut req) };
    if rc < 0 { Err(io::Error::last_os_error()) } else { Ok(()) }
}

/// The ethtool statistics of `ifname`, in the driver's order.
pub fn stats(ifname: &str) -> io::Result<Vec<(String, u64)>> {
    // SAFETY: a plain datagram socket, closed below.
    let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    let r = stats_on(fd, ifname);
    // SAFETY: `fd` was opened above and is not used after this.
    unsafe { libc::close(fd) };
    r
}

fn stats_on(fd: libc::c_int, ifname: &str) -> io::Result<Vec<(String, u64)>> {
    // struct ethtool_sset_info { u32 cmd; u32 reserved; u64 sset_mask; u32 data[]; }
    let mut info = [0u64; 3];
    info[0] = u64::from(ETHTOOL_GSSET_INFO);
    info[1] = 1 << ETH_SS_STATS;
    ioctl(fd, ifname, &mut info)?;
    if info[1] & (1 << ETH_SS_STATS) == 0 {
        return Ok(Vec::new());
    }
    let n = (info[2] & 0xffff_ffff) as usize;
    if n == 0 || n > 1 << 16 {
        return Ok(Vec::new());
    }
    // struct ethtool_gstrings { u32 cmd; u32 string_set; u32 len; u8 data[]; }
    let words = (12 + n * ETH_GSTRING_LEN).div_ceil(8);
    let mut strings = vec![0u64; words];
    {
        let b = bytes_mut(&mut strings);
        b[0..4].copy_from_slice(&ETHTOOL_GSTRINGS.to_ne_bytes());
        b[4..8].copy_from_slice(&ETH_SS_STATS.to_ne_bytes());
        b[8..12].copy_from_slice(&(n as u32).to_ne_bytes());
    }
    ioctl(fd, ifname, &mut strings)?;
    // struct ethtool_stats { u32 cmd; u32 n_stats; u64 data[]; }
    let mut values = vec![0u64; 1 + n];
    values[0] = u64::from(ETHTOOL_GSTATS) | ((n as u64) << 32);
    if cfg!(target_endian = "big") {
        values[0] = (u64::from(ETHTOOL_GSTATS) << 32) | n as u64;
    }
    ioctl(fd, ifname, &mut values)?;
    let b = bytes_mut(&mut strings);
    let got = u32::from_ne_bytes([b[8], b[9], b[10], b[11]]) as usize;
    let names = &b[12..];
    Ok((0..n.min(got))
        .map(|i| {
            let raw = &names[i * ETH_GSTRING_LEN..(i + 1) * ETH_GSTRING_LEN];
            let end = raw.iter().position(|&c| c == 0).unwrap_or(raw.len());
            (String::from_utf8_lossy(&raw[..end]).into_owned(), values[1 + i])
        })
        .collect())
}

fn bytes_mut(words: &mut [u64]) -> &mut [u8] {
    let len = std::mem::size_of_val(words);
    // SAFETY: any u64 slice is a valid, aligned byte slice of 8 × its length, borrowed
    // mutably for no longer than `words`.
    unsafe { std::slice::from_raw_parts_mut(words.as_mut_ptr().cast::<u8>(), len) }
}

#[cfg(test)]
mod tests {
    #[test]
    fn loopback_has_no_statistics_or_says_so() {
        // lo has no ethtool statistics: an empty list or EOPNOTSUPP, never garbage.
        match super::stats("lo") {
            Ok(v) => assert!(v.is_empty(), "{v:?}"),
            Err(e) => assert_eq!(e.raw_os_error(), Some(libc::EOPNOTSUPP), "{e}"),
        }
        assert!(super::stats("no-such-netdev0").is_err());
    }
}

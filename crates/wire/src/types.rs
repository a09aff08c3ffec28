//! Newtypes for the identifiers the transport headers carry.

use core::fmt;

/// A 24-bit Packet Sequence Number. Arithmetic wraps modulo 2^24.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct Psn(u32);

impl Psn {
    /// The PSN space is 24 bits.
    pub const MASK: u32 = 0x00ff_ffff;

    /// A PSN from the low 24 bits of `v`.
    pub const fn new(v: u32) -> Self {
        Psn(v & Self::MASK)
    }

    /// The PSN as a number in `0..2^24`.
    pub const fn get(self) -> u32 {
        self.0
    }

    /// `self + n`, modulo 2^24.
    #[must_use]
    pub const fn add(self, n: u32) -> Self {
        Psn(self.0.wrapping_add(n) & Self::MASK)
    }

    /// The signed distance from `other` to `self` in the 24-bit circle: positive when `self` is
    /// ahead of `other`, in `-2^23..2^23`.
    pub const fn diff(self, other: Psn) -> i32 {
        let d = self.0.wrapping_sub(other.0) & Self::MASK;
        ((d << 8) as i32) >> 8
    }
}

impl fmt::Display for Psn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

/// A 24-bit Queue Pair Number.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct Qpn(u32);

impl Qpn {
    /// QP numbers are 24 bits.
    pub const MASK: u32 = 0x00ff_ffff;

    /// A QPN from the low 24 bits of `v`.
    pub const fn new(v: u32) -> Self {
        Qpn(v & Self::MASK)
    }

    /// The QPN as a number.
    pub const fn get(self) -> u32 {
        self.0
    }
}

impl fmt::Display for Qpn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:#08x}", self.0)
    }
}

/// A remote key: names a memory region (or window) to a remote peer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct RKey(pub u32);

impl fmt::Display for RKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:#010x}", self.0)
    }
}

/// A Queue Key: the 32-bit key a UD (or RD) receiver checks before accepting a datagram.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct QKey(pub u32);

impl fmt::Display for QKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:#010x}", self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn psn_wraps_at_24_bits() {
        assert_eq!(Psn::new(0xff_ffff).add(1), Psn::new(0));
        assert_eq!(Psn::new(0x1ff_ffff).get(), 0xff_ffff);
        assert_eq!(Psn::new(0).diff(Psn::new(0xff_ffff)), 1);
        assert_eq!(Psn::new(0xff_ffff).diff(Psn::new(0)), -1);
        assert_eq!(Psn::new(5).diff(Psn::new(2)), 3);
        assert_eq!(Psn::new(0x80_0000).diff(Psn::new(0)), -0x80_0000);
    }
}

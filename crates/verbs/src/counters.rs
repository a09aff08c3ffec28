//! Transport counters. Names follow Linux rxe's `hw_counters` where the two overlap, so the
//! telemetry agent can export soft and rxe devices alike.

macro_rules! counters {
    ($($(#[$doc:meta])* $name:ident),* $(,)?) => {
        /// Counters of one endpoint, monotonic.
        #[derive(Debug, Clone, Default, PartialEq, Eq)]
        pub struct Counters {
            $($(#[$doc])* pub $name: u64,)*
        }

        impl Counters {
            /// Every counter as (name, value), in declaration order.
            pub fn iter(&self) -> impl Iterator<Item = (&'static str, u64)> + '_ {
                [$((stringify!($name), self.$name)),*].into_iter()
            }

            /// Sets the counter called `name`; false if there is none.
            pub fn set(&mut self, name: &str, value: u64) -> bool {
                match name {
                    $(stringify!($name) => self.$name = value,)*
                    _ => return false,
                }
                true
            }
        }
    };
}

counters! {
    /// Packets handed to the driver (rxe: sent_pkts).
    sent_pkts,
    /// Packets taken from the driver: header checks and ICRC passed (rxe: rcvd_pkts).
    rcvd_pkts,
    /// Request packets the responder saw a second time (rxe: duplicate_request).
    duplicate_request,
    /// Request packets ahead of the expected PSN (rxe: out_of_seq_request).
    out_of_seq_request,
    /// RNR NAKs received by the requester (rxe: rcvd_rnr_err).
    rcvd_rnr_err,
    /// RNR NAKs sent by the responder (rxe: send_rnr_err).
    send_rnr_err,
    /// PSN-sequence-error NAKs received by the requester (rxe: rcvd_seq_err).
    rcvd_seq_err,
    /// PSN-sequence-error NAKs sent by the responder.
    sent_seq_err,
    /// ACKs the responder sent again unasked, once a requester that resent a message fell
    /// quiet (what frees a Linux rxe requester that would otherwise wait for good).
    unasked_acks,
    /// Work requests failed with RETRY_EXC_ERR (rxe: retry_exceeded_err).
    retry_exceeded_err,
    /// Work requests failed with RNR_RETRY_EXC_ERR (rxe: retry_rnr_exceeded_err).
    retry_rnr_exceeded_err,
    /// Go-back-N restarts of the requester, for any reason (rxe: completer_retry_err).
    completer_retry_err,
    /// Retransmission timer expiries (mlx5: local_ack_timeout_err).
    local_ack_timeout_err,
    /// Packets sent again by a go-back-N restart.
    retransmitted_pkts,
    /// Packets dropped because their ICRC did not verify.
    icrc_errors,
    /// Packets whose ICRC could not be checked (the driver had no IP header); must stay 0 on a
    /// default soft path.
    icrc_unverified,
    /// Datagrams the soft provider's receiving socket dropped for want of buffer room (the
    /// kernel's `sk_drops`, read with `SO_MEMINFO`): the receiver fell behind. Reliable QPs resend them;
    /// on UC and UD they are lost. 0 on other providers.
    rx_socket_drops,
    /// Packets dropped before the transport took them: unknown destination QP, not from a
    /// connected QP's peer, wrong transport or state, malformed (each reason below too).
    dropped_pkts,
    /// Of those: for a QP this device does not have.
    dropped_unknown_qp,
    /// Of those: for a connected QP, from an address other than its peer's (a forged or
    /// stray packet).
    dropped_wrong_source,
    /// Responses (ACK, NAK, READ and atomic responses) whose PSN matches no outstanding
    /// request: ignored, as stale or forged.
    dropped_out_of_window,
    /// UD packets dropped on a Q_Key mismatch.
    qkey_violations,
    /// UD/UC packets dropped for want of a receive.
    rcv_no_wqe,
    /// NAKs sent for invalid requests, remote access or operational errors.
    sent_nak_err,
    /// Received packets marked CE (ECN congestion experienced).
    ecn_ce_rcvd,
    /// CNPs sent in answer to CE marks (mlx5: np_cnp_sent).
    cnp_sent,
    /// CNPs received (mlx5: rp_cnp_handled).
    cnp_rcvd,
    /// CE marks not answered because the per-QP CNP rate limit held them back.
    cnp_rate_limited,
    /// SEND messages received (rxe: rdma_recvs counts these and WRITE-with-immediate).
    rdma_recvs,
    /// Messages completed by the requester (rxe: rdma_sends).
    rdma_sends,
}

impl Counters {
    /// The counters above zero as `name value`, joined by ", " (`all 0` when none is): what
    /// the cause of a stalled or failed exchange is read from (losses, NAKs, retries).
    pub fn moved(&self) -> String {
        let moved: Vec<String> =
            self.iter().filter(|(_, v)| *v > 0).map(|(k, v)| format!("{k} {v}")).collect();
        if moved.is_empty() { "all 0".into() } else { moved.join(", ") }
    }
}

#[cfg(test)]
mod tests {
    use super::Counters;

    #[test]
    fn moved_lists_the_counters_above_zero_in_order() {
        let mut c = Counters::default();
        assert_eq!(c.moved(), "all 0");
        c.rdma_sends = 3;
        c.sent_pkts = 12;
        assert_eq!(c.moved(), "sent_pkts 12, rdma_sends 3");
    }
}

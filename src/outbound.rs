//! Where outbound callbacks may go: the URL rules the router checks when a request arrives, and the DNS resolver
//! the webhook client connects through, which resolves the host and refuses it when any address is blocked.
//!
//! Never reachable: link-local addresses (169.254.0.0/16, fe80::/10: the instance metadata service and the ECS
//! task metadata endpoint live there), AWS's IPv6 metadata address fd00:ec2::254, unspecified, multicast and
//! reserved addresses. Reachable only when the operator allows private targets: loopback (127.0.0.0/8, ::1),
//! private networks (10.0.0.0/8, 172.16.0.0/12, 192.168.0.0/16), shared address space (100.64.0.0/10) and
//! unique-local IPv6 (fc00::/7).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use reqwest::Url;
use reqwest::dns::{Addrs, Name, Resolve, Resolving};

/// AWS's instance metadata service over IPv6.
const METADATA_V6: Ipv6Addr = Ipv6Addr::new(0xfd00, 0x0ec2, 0, 0, 0, 0, 0, 0x0254);

/// The operator's choices for callback URLs (both off in production).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct OutboundPolicy {
    /// Allow http:// callback URLs (local development); https only otherwise.
    pub allow_http: bool,
    /// Allow loopback and private-network addresses (local development and tests).
    pub allow_private: bool,
}

/// Why a callback URL or one of its addresses is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    #[error("must be an https:// URL (http callbacks are not allowed here)")]
    Http,
    #[error("{host}{}: a {kind} address, where callbacks may not go", resolved(.host, .address))]
    Address { host: String, address: IpAddr, kind: &'static str },
    #[error("{0} has no address")]
    NoAddress(String),
}

/// How far an address is reachable.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Reach {
    Public,
    /// Only when the operator allows private targets.
    Private(&'static str),
    Never(&'static str),
}

impl OutboundPolicy {
    /// Checks what can be checked without resolving: the scheme, and the host when it is an IP address.
    pub(crate) fn check_url(&self, url: &Url) -> Result<(), Refusal> {
        if url.scheme() != "https" && !self.allow_http {
            return Err(Refusal::Http);
        }
        let host = url.host_str().unwrap_or_default();
        match host.trim_start_matches('[').trim_end_matches(']').parse::<IpAddr>() {
            Ok(address) => self.check_address(host, address),
            Err(_) => Ok(()),
        }
    }

    /// Checks one address `host` resolved to.
    pub(crate) fn check_address(&self, host: &str, address: IpAddr) -> Result<(), Refusal> {
        match reach(address) {
            Reach::Public => Ok(()),
            Reach::Private(_) if self.allow_private => Ok(()),
            Reach::Private(kind) | Reach::Never(kind) => Err(Refusal::Address { host: host.to_owned(), address, kind }),
        }
    }

    /// The resolver a callback client connects through: every address of a host is checked before any is used.
    pub fn resolver(self) -> GuardedResolver {
        GuardedResolver { policy: self }
    }
}

/// Resolves with the system resolver, then refuses the whole host if any address is blocked (a host with one
/// public and one metadata address must not get a second chance on the other).
#[derive(Debug, Clone, Copy)]
pub struct GuardedResolver {
    policy: OutboundPolicy,
}

impl Resolve for GuardedResolver {
    fn resolve(&self, name: Name) -> Resolving {
        let policy = self.policy;
        let host = name.as_str().to_owned();
        Box::pin(async move {
            let addresses: Vec<SocketAddr> = tokio::net::lookup_host((host.as_str(), 0)).await?.collect();
            if addresses.is_empty() {
                return Err(Refusal::NoAddress(host).into());
            }
            for address in &addresses {
                policy.check_address(&host, address.ip())?;
            }
            Ok(Box::new(addresses.into_iter()) as Addrs)
        })
    }
}

/// What a host name resolved to, when it is not an address itself.
fn resolved(host: &str, address: &IpAddr) -> String {
    if host.trim_start_matches('[').trim_end_matches(']') == address.to_string() {
        String::new()
    } else {
        format!(" (resolves to {address})")
    }
}

/// The refusal behind an error from a client using [`GuardedResolver`], if that is why it failed.
pub(crate) fn refusal_in<'a>(error: &'a (dyn std::error::Error + 'static)) -> Option<&'a Refusal> {
    let mut cause = Some(error);
    while let Some(current) = cause {
        if let Some(refusal) = current.downcast_ref::<Refusal>() {
            return Some(refusal);
        }
        cause = current.source();
    }
    None
}

fn reach(address: IpAddr) -> Reach {
    match address {
        IpAddr::V4(v4) => reach_v4(v4),
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => reach_v4(v4),
            None => reach_v6(v6),
        },
    }
}

fn reach_v4(v4: Ipv4Addr) -> Reach {
    let [a, b, ..] = v4.octets();
    if v4.is_link_local() {
        Reach::Never("link-local (instance metadata)")
    } else if a == 0 || v4.is_broadcast() || v4.is_multicast() || a >= 240 {
        Reach::Never("unspecified, multicast or reserved")
    } else if v4.is_loopback() {
        Reach::Private("loopback")
    } else if v4.is_private() {
        Reach::Private("private-network")
    } else if a == 100 && (64..128).contains(&b) {
        Reach::Private("shared (carrier-grade NAT)")
    } else {
        Reach::Public
    }
}

fn reach_v6(v6: Ipv6Addr) -> Reach {
    let first = v6.segments()[0];
    if v6 == METADATA_V6 {
        Reach::Never("instance metadata")
    } else if first & 0xffc0 == 0xfe80 {
        Reach::Never("link-local")
    } else if v6.is_unspecified() || v6.is_multicast() {
        Reach::Never("unspecified or multicast")
    } else if v6.is_loopback() {
        Reach::Private("loopback")
    } else if first & 0xfe00 == 0xfc00 {
        Reach::Private("unique-local")
    } else {
        Reach::Public
    }
}

//! Where outbound callbacks may go: the URL rules the router checks when a request arrives, and the DNS resolver
//! the webhook client connects through, which resolves the host and refuses it when any address is blocked.
//!
//! The address rules follow IANA's IPv4 and IPv6 Special-Purpose Address Registries. Never reachable: link-local
//! addresses (169.254.0.0/16, fe80::/10: the instance metadata service and the ECS task metadata endpoint live
//! there), AWS's IPv6 metadata address fd00:ec2::254, and every other special-purpose block that is not globally
//! reachable (this network, IETF protocol assignments, documentation, benchmarking, the 6to4 relay anycast,
//! reserved, multicast, broadcast; IPv6 discard-only, documentation, benchmarking, ORCHID, Teredo, NAT64
//! local-use, SRv6 SIDs, the deprecated site-local fec0::/10). Reachable only when the operator allows private
//! targets: loopback (127.0.0.0/8, ::1), private networks (10.0.0.0/8, 172.16.0.0/12, 192.168.0.0/16), shared
//! address space (100.64.0.0/10) and unique-local IPv6 (fc00::/7). An IPv6 address that carries an IPv4 one
//! (IPv4-mapped ::ffff:0:0/96, IPv4-translated ::ffff:0:0:0/96, IPv4-compatible ::/96, NAT64 64:ff9b::/96, 6to4
//! 2002::/16) is judged by the IPv4 address it carries. A localhost name (RFC 6761) is loopback, judged without a
//! lookup. Port 0 is refused.

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
    #[error("port 0 is not a port a callback can be sent to")]
    PortZero,
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
        if url.port() == Some(0) {
            return Err(Refusal::PortZero);
        }
        let host = url.host_str().unwrap_or_default();
        match host.trim_start_matches('[').trim_end_matches(']').parse::<IpAddr>() {
            Ok(address) => self.check_address(host, address),
            // RFC 6761: a localhost name is loopback wherever it is looked up; judged without a lookup.
            Err(_) if is_localhost(host) => self.check_address(host, IpAddr::V4(Ipv4Addr::LOCALHOST)),
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
    pub(crate) fn resolver(self) -> GuardedResolver {
        GuardedResolver { policy: self }
    }
}

/// Resolves with the system resolver, then refuses the whole host if any address is blocked (a host with one
/// public and one metadata address must not get a second chance on the other).
#[derive(Debug, Clone, Copy)]
pub(crate) struct GuardedResolver {
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

/// Whether `host` is `localhost` or a name under it, with or without the root's trailing dot, in any case.
fn is_localhost(host: &str) -> bool {
    let name = host.trim_end_matches('.').to_ascii_lowercase();
    name == "localhost" || name.ends_with(".localhost")
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
        IpAddr::V6(v6) => match embedded_v4(v6) {
            Some(v4) => reach_v4(v4),
            None => reach_v6(v6),
        },
    }
}

/// The IPv4 address an IPv6 one carries, for the forms that route to it: IPv4-mapped (::ffff:a.b.c.d),
/// IPv4-translated (::ffff:0:a.b.c.d), IPv4-compatible (::a.b.c.d, but not :: or ::1), NAT64's well-known prefix
/// (64:ff9b::a.b.c.d) and 6to4 (2002:aabb:ccdd::/48).
fn embedded_v4(v6: Ipv6Addr) -> Option<Ipv4Addr> {
    let s = v6.segments();
    let last = Ipv4Addr::new((s[6] >> 8) as u8, s[6] as u8, (s[7] >> 8) as u8, s[7] as u8);
    match s {
        [0, 0, 0, 0, 0, 0xffff, _, _] | [0, 0, 0, 0, 0xffff, 0, _, _] | [0x64, 0xff9b, 0, 0, 0, 0, _, _] => Some(last),
        [0, 0, 0, 0, 0, 0, _, _] if !v6.is_unspecified() && !v6.is_loopback() => Some(last),
        [0x2002, high, low, ..] => Some(Ipv4Addr::new((high >> 8) as u8, high as u8, (low >> 8) as u8, low as u8)),
        _ => None,
    }
}

/// IANA IPv4 Special-Purpose Address Registry, plus multicast and the reserved 240.0.0.0/4.
fn reach_v4(v4: Ipv4Addr) -> Reach {
    let [a, b, c, _] = v4.octets();
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
    } else if (a, b, c) == (192, 0, 0) {
        Reach::Never("IETF protocol assignment")
    } else if matches!((a, b, c), (192, 0, 2) | (198, 51, 100) | (203, 0, 113)) {
        Reach::Never("documentation")
    } else if a == 198 && (b == 18 || b == 19) {
        Reach::Never("benchmarking")
    } else if (a, b, c) == (192, 88, 99) {
        Reach::Never("6to4 relay anycast")
    } else {
        Reach::Public
    }
}

/// IANA IPv6 Special-Purpose Address Registry (the blocks that are not globally reachable), and fec0::/10.
fn reach_v6(v6: Ipv6Addr) -> Reach {
    let s = v6.segments();
    if v6 == METADATA_V6 {
        Reach::Never("instance metadata")
    } else if s[0] & 0xffc0 == 0xfe80 {
        Reach::Never("link-local")
    } else if s[0] & 0xffc0 == 0xfec0 {
        Reach::Never("site-local")
    } else if v6.is_unspecified() || v6.is_multicast() {
        Reach::Never("unspecified or multicast")
    } else if v6.is_loopback() {
        Reach::Private("loopback")
    } else if s[0] & 0xfe00 == 0xfc00 {
        Reach::Private("unique-local")
    } else if matches!(s, [0x100, 0, 0, 0, ..]) {
        Reach::Never("discard-only")
    } else if (s[0], s[1]) == (0x2001, 0xdb8) || (s[0] == 0x3fff && s[1] & 0xf000 == 0) {
        Reach::Never("documentation")
    } else if (s[0], s[1], s[2]) == (0x2001, 2, 0) {
        Reach::Never("benchmarking")
    } else if s[0] == 0x2001 && (s[1] & 0xfff0 == 0x10 || s[1] & 0xfff0 == 0x20) {
        Reach::Never("ORCHID")
    } else if (s[0], s[1]) == (0x2001, 0) {
        Reach::Never("Teredo")
    } else if (s[0], s[1], s[2]) == (0x64, 0xff9b, 1) {
        Reach::Never("NAT64 local-use")
    } else if s[0] == 0x5f00 {
        Reach::Never("SRv6 SID")
    } else {
        Reach::Public
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    //! Each address form a callback could use to reach what it must not: the IANA special-purpose blocks, IPv4
    //! carried inside IPv6, and port 0.

    use std::net::IpAddr;

    use reqwest::Url;

    use super::{OutboundPolicy, Reach, Refusal, reach};

    fn reach_of(address: &str) -> Reach {
        reach(address.parse::<IpAddr>().unwrap())
    }

    #[test]
    fn ipv6_forms_that_carry_the_metadata_address_are_refused_as_it_is() {
        for form in [
            "::ffff:169.254.169.254",
            "::169.254.169.254",
            "::ffff:0:169.254.169.254",
            "64:ff9b::a9fe:a9fe",
            "64:ff9b::169.254.169.254",
            "2002:a9fe:a9fe::1",
        ] {
            assert_eq!(reach_of(form), Reach::Never("link-local (instance metadata)"), "{form}");
        }
        for form in ["::ffff:127.0.0.1", "::127.0.0.1", "64:ff9b::10.0.0.1", "2002:c0a8:0101::"] {
            assert!(matches!(reach_of(form), Reach::Private(_)), "{form}: {:?}", reach_of(form));
        }
        assert_eq!(reach_of("64:ff9b::8.8.8.8"), Reach::Public, "NAT64 to a public address is public");
        assert_eq!(reach_of("::1"), Reach::Private("loopback"), "::1 is loopback, not IPv4-compatible 0.0.0.1");
    }

    #[test]
    fn the_special_purpose_registries_are_refused() {
        for address in [
            "0.1.2.3",
            "192.0.0.8",
            "192.0.2.1",
            "198.51.100.7",
            "203.0.113.9",
            "198.18.0.1",
            "198.19.255.254",
            "192.88.99.1",
            "240.0.0.1",
            "255.255.255.255",
            "224.0.0.1",
            "fec0::1",
            "feff::1",
            "100::1",
            "2001:db8::1",
            "3fff::1",
            "2001:2::1",
            "2001:10::1",
            "2001:20::1",
            "2001::1",
            "64:ff9b:1::1",
            "5f00::1",
            "ff02::1",
            "::",
        ] {
            assert!(matches!(reach_of(address), Reach::Never(_)), "{address}: {:?}", reach_of(address));
        }
        for address in
            ["8.8.8.8", "1.1.1.1", "192.0.1.1", "198.20.0.1", "2600:1f18::1", "2001:4860::8888", "3fff:1000::1"]
        {
            assert_eq!(reach_of(address), Reach::Public, "{address}");
        }
    }

    #[test]
    fn port_zero_is_refused() {
        let policy = OutboundPolicy { allow_http: true, allow_private: true };
        assert_eq!(policy.check_url(&Url::parse("https://example.com:0/hook").unwrap()), Err(Refusal::PortZero));
        assert_eq!(policy.check_url(&Url::parse("https://example.com:8443/hook").unwrap()), Ok(()));
    }

    /// RFC 6761: localhost names are loopback; refused at the URL, with no lookup, as a loopback address is.
    #[test]
    fn localhost_names_are_loopback_without_a_lookup() {
        let production = OutboundPolicy::default();
        for host in ["localhost", "localhost.", "LocalHost", "api.localhost", "a.b.localhost."] {
            let url = Url::parse(&format!("https://{host}/hook")).unwrap();
            assert!(matches!(production.check_url(&url), Err(Refusal::Address { .. })), "{host}");
            let local = OutboundPolicy { allow_http: true, allow_private: true };
            assert_eq!(local.check_url(&url), Ok(()), "{host}: allowed where private targets are");
        }
        assert_eq!(production.check_url(&Url::parse("https://notlocalhost.example/hook").unwrap()), Ok(()));
    }
}

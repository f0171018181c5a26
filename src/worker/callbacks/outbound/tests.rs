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
    for address in ["8.8.8.8", "1.1.1.1", "192.0.1.1", "198.20.0.1", "2600:1f18::1", "2001:4860::8888", "3fff:1000::1"]
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

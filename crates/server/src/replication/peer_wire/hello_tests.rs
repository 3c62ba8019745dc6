//! Tests of the hello encodings: round trips in every version, listeners, fixed field
//! numbers, the checks on advertised addresses.

use super::*;
use crate::replication::peer_wire::VERSION_2;

fn dirs() -> HelloDirs {
    HelloDirs {
        dir: 0x0123_4567_89ab_cdef_0011_2233_4455_6677,
        known_dir_of_receiver: 0,
        receiver_rejoining: true,
        sender_settled: true,
    }
}

/// Parses a whole hello as the listener does, from bytes in memory.
fn parse_hello(b: &[u8]) -> Result<Hello, WireError> {
    let start: [u8; 6] = b.get(..6).ok_or(WireError::Truncated)?.try_into().unwrap();
    let version = check_hello_start(&start)?;
    let rest = &b[6..];
    if version == VERSION_3 {
        let len = parse_v3_length(
            rest.get(..4)
                .ok_or(WireError::Truncated)?
                .try_into()
                .unwrap(),
        )?;
        return decode_v3_hello(rest.get(4..4 + len).ok_or(WireError::Truncated)?);
    }
    let head = rest.get(..LEGACY_HEAD_BYTES).ok_or(WireError::Truncated)?;
    let (from, len) = parse_legacy_head(head.try_into().unwrap())?;
    let rest = &rest[LEGACY_HEAD_BYTES..];
    let advertised = String::from_utf8(rest[..len].to_vec()).unwrap();
    let dirs = if version == VERSION_2 {
        parse_legacy_v2_tail(rest[len..len + LEGACY_V2_TAIL_BYTES].try_into().unwrap())
    } else {
        HelloDirs::default()
    };
    Ok(Hello {
        version,
        from,
        advertised,
        dirs,
        software_version: String::new(),
        installs_metadata_snapshots: false,
        appends_compacted_entries: false,
        listeners: Vec::new(),
    })
}

/// Version 3 hellos carry every Kafka listener; bad ones refuse the hello.
#[test]
fn hellos_carry_listeners() {
    let listeners = vec![
        ("PLAINTEXT".to_string(), "h:9092".to_string()),
        ("SASL_SSL".to_string(), "h:9093".to_string()),
    ];
    let bytes = encode_hello_with_listeners(VERSION_3, 7, "h:9092", &listeners, dirs());
    assert_eq!(parse_hello(&bytes).unwrap().listeners, listeners);
    // Versions 1 and 2 cannot carry them (an older node reads only `advertised`).
    let v2 = encode_hello_with_listeners(VERSION_2, 7, "h:9092", &listeners, dirs());
    assert!(parse_hello(&v2).unwrap().listeners.is_empty());
    for bad in [("", "h:1"), ("A B", "h:1"), ("OK", "nohostport")] {
        let l = vec![(bad.0.to_string(), bad.1.to_string())];
        let bytes = encode_hello_with_listeners(VERSION_3, 7, "h:1", &l, dirs());
        assert!(parse_hello(&bytes).is_err(), "{bad:?}");
    }
    let many: Vec<(String, String)> = (0..MAX_HELLO_LISTENERS + 1)
        .map(|i| (format!("L{i}"), "h:1".to_string()))
        .collect();
    let wire = PeerHelloWire {
        from_node: 7,
        advertised: "h:1".into(),
        listeners: many
            .into_iter()
            .map(|(name, advertised)| KafkaListenerWire { name, advertised })
            .collect(),
        ..Default::default()
    };
    assert!(decode_v3_hello(&wire.encode_to_vec()).is_err());
}

#[test]
fn hellos_round_trip_in_both_versions() {
    for version in [VERSION_1, VERSION_2, VERSION_3] {
        let bytes = encode_hello(version, 7, "kafka-7.example:9092", dirs());
        let hello = parse_hello(&bytes).unwrap();
        assert_eq!(hello.version, version);
        assert_eq!(hello.from, 7);
        assert_eq!(hello.advertised, "kafka-7.example:9092");
        let sent = if version == VERSION_1 {
            HelloDirs::default()
        } else {
            dirs()
        };
        assert_eq!(hello.dirs, sent);
    }
    // Version 1 is exactly the earlier release's layout.
    let mut v1 = b"VDLP\x00\x01".to_vec();
    v1.extend_from_slice(&7u64.to_be_bytes());
    v1.extend_from_slice(&3u16.to_be_bytes());
    v1.extend_from_slice(b"h:1");
    assert_eq!(encode_hello(VERSION_1, 7, "h:1", dirs()), v1);
    let v3 = parse_hello(&encode_hello(VERSION_3, 7, "h:1", HelloDirs::default())).unwrap();
    assert_eq!(v3.software_version, env!("CARGO_PKG_VERSION"));
    assert_eq!(v3.dirs, HelloDirs::default());
    // This release says it appends compacted entries; older layouts cannot say so.
    assert!(v3.appends_compacted_entries);
    let v2 = parse_hello(&encode_hello(VERSION_2, 7, "h:1", dirs())).unwrap();
    assert!(!v2.appends_compacted_entries);
    // Field 10 (bool): an older version 3 hello without it says false.
    let mut with_flag = b"VDLP\x00\x03".to_vec();
    let body = [0x08, 0x05, 0x12, 0x03, b'h', b':', b'1', 0x50, 0x01];
    with_flag.extend_from_slice(&(body.len() as u32).to_be_bytes());
    with_flag.extend_from_slice(&body);
    assert!(parse_hello(&with_flag).unwrap().appends_compacted_entries);
    let without = &body[..7];
    let mut old = b"VDLP\x00\x03".to_vec();
    old.extend_from_slice(&(without.len() as u32).to_be_bytes());
    old.extend_from_slice(without);
    assert!(!parse_hello(&old).unwrap().appends_compacted_entries);
}

/// The field numbers of `PeerHello` are the wire format.
#[test]
fn hello_field_numbers_are_fixed() {
    let mut expected = b"VDLP\x00\x03".to_vec();
    let body = [
        0x08, 0x05, // from_node = 5
        0x12, 0x03, b'h', b':', b'1', // advertised = "h:1"
        0x30, 0x01, // sender_settled = true
    ];
    expected.extend_from_slice(&(body.len() as u32).to_be_bytes());
    expected.extend_from_slice(&body);
    let hello = parse_hello(&expected).unwrap();
    assert_eq!((hello.from, hello.advertised.as_str()), (5, "h:1"));
    assert!(hello.dirs.sender_settled && !hello.dirs.receiver_rejoining);
    // A directory id of another length than 16 is refused; an empty one is none.
    for (dir, ok) in [
        (vec![], true),
        (vec![1u8; 5], false),
        (vec![1u8; 17], false),
    ] {
        let wire = PeerHelloWire {
            from_node: 5,
            advertised: "h:1".into(),
            directory_id: dir,
            ..Default::default()
        };
        assert_eq!(decode_v3_hello(&wire.encode_to_vec()).is_ok(), ok);
    }
    let err = check_hello_start(b"VDLP\x00\x04").unwrap_err();
    assert!(err.to_string().contains("version 4"), "{err}");
    assert!(parse_v3_length((MAX_HELLO_BYTES as u32 + 1).to_be_bytes()).is_err());
}

#[test]
fn advertised_addresses_are_host_and_port() {
    for ok in ["127.0.0.1:9092", "kafka-1.example:9092", "[::1]:9092"] {
        assert!(valid_advertised(ok), "{ok}");
    }
    for bad in [
        "",
        ":9092",
        "host",
        "host:",
        "host:99999",
        "ho st:1",
        "h\u{e9}:1",
    ] {
        assert!(!valid_advertised(bad), "{bad}");
    }
}

//! Unit tests of `router/openai/jsonl_check.rs`.

use super::*;

async fn check(chunks: Vec<&'static str>) -> Result<Vec<u8>, String> {
    let source = stream::iter(chunks.into_iter().map(|c| Ok::<_, std::io::Error>(Bytes::from_static(c.as_bytes()))));
    let (mut checked, refusal) = checked(source);
    let mut passed = Vec::new();
    while let Some(chunk) = checked.next().await {
        match chunk {
            Ok(chunk) => passed.extend_from_slice(&chunk),
            Err(_) => return Err(reason(&refusal).unwrap_or_default()),
        }
    }
    Ok(passed)
}

#[tokio::test]
async fn lines_split_across_chunks_pass_whole() {
    let passed = check(vec!["{\"a\":", "1}\n\n{\"b\":2}"]).await;
    assert_eq!(passed.as_deref(), Ok(&b"{\"a\":1}\n\n{\"b\":2}"[..]));
}

#[tokio::test]
async fn a_bad_line_is_refused_by_its_number() {
    let refused = check(vec!["{\"a\":1}\n\n", "[1]\n"]).await.unwrap_err();
    assert!(refused.starts_with("line 3: not a JSON object"), "{refused}");
    let refused = check(vec!["{\"a\":1}\n{oops"]).await.unwrap_err();
    assert!(refused.starts_with("line 2: not valid JSON"), "{refused}");
    let refused = check(vec!["\n \n"]).await.unwrap_err();
    assert!(refused.contains("holds no request"), "{refused}");
}

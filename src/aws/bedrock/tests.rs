//! Unit tests of `aws/bedrock.rs`.

use super::*;

#[test]
fn a_profile_id_names_its_model_and_a_model_id_none() {
    assert_eq!(profile_model("us.amazon.nova-micro-v1:0"), Some("amazon.nova-micro-v1:0"));
    assert_eq!(profile_model("apac.amazon.nova-micro-v1:0"), Some("amazon.nova-micro-v1:0"));
    assert_eq!(profile_model("amazon.nova-micro-v1:0"), None);
    assert_eq!(profile_model("arn:aws:bedrock:us-east-1:1:inference-profile/us.a.b"), None);
}

#[test]
fn grants_and_suggestions_name_the_profile_of_the_region() {
    assert_eq!(suggested_profile("amazon.nova-micro-v1:0", "us-west-2"), "us.amazon.nova-micro-v1:0");
    assert_eq!(suggested_profile("amazon.nova-lite-v1:0", "eu-west-1"), "eu.amazon.nova-lite-v1:0");
    assert!(suggested_profile("amazon.nova-micro-v1:0", "sa-east-1").contains("list-inference-profiles"));
    let grant = invoke_grant("us.amazon.nova-micro-v1:0", "us-west-2");
    assert!(grant.contains("arn:aws:bedrock:us-west-2:ACCOUNT_ID:inference-profile/us.amazon.nova-micro-v1:0"));
    assert!(grant.contains("arn:aws:bedrock:*::foundation-model/amazon.nova-micro-v1:0"));
    assert_eq!(
        invoke_grant("amazon.nova-micro-v1:0", "us-gov-west-1"),
        "arn:aws-us-gov:bedrock:us-gov-west-1::foundation-model/amazon.nova-micro-v1:0"
    );
}

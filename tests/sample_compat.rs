//! What users of the AWS sample (sample-ecs-inference-pipeline) read from a stack keeps its name and meaning in
//! template.yaml: outputs, queue names, alarm names, cooldowns.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use serde_json::json;
use support::cfn::template;

/// The outputs the sample's scripts and tests/test_integration.py read, and what each must be.
#[test]
fn every_output_of_the_sample_is_there_with_its_meaning() {
    let t = template();
    let arn = |resource: &str| json!({"Fn::GetAtt": [resource, "Arn"]});
    let reference = |resource: &str| json!({"Ref": resource});
    let expected = [
        ("ClusterArn", arn("Cluster")),
        ("RequestQueueUrl", reference("SmallQueue")),
        ("RequestQueueArn", arn("SmallQueue")),
        ("LargeModelRequestQueueUrl", reference("LargeQueue")),
        ("LargeModelRequestQueueArn", arn("LargeQueue")),
        ("ECRRepositoryUri", json!({"Fn::GetAtt": ["Repository", "RepositoryUri"]})),
        ("SmallModelTaskDefinitionArn", reference("SmallTaskDefinition")),
        ("LargeModelTaskDefinitionArn", reference("LargeTaskDefinition")),
        ("SmallModelServiceName", json!({"Fn::GetAtt": ["SmallService", "Name"]})),
        ("LargeModelServiceName", json!({"Fn::GetAtt": ["LargeService", "Name"]})),
        ("ContainerInstanceHealthLogGroup", reference("InstanceHealthLogGroup")),
    ];
    for (output, value) in expected {
        assert_eq!(t["Outputs"][output]["Value"], value, "output {output}");
    }
    for output in ["DashboardUrl", "InferenceApiUrl", "ResultsBucketName"] {
        assert!(t["Outputs"][output]["Value"].is_object(), "output {output}");
    }
    let api = t["Outputs"]["InferenceApiUrl"]["Value"]["Fn::Sub"].as_str().unwrap();
    assert!(api.ends_with("/infer"), "InferenceApiUrl is where requests are POSTed, as in the sample");
}

#[test]
fn queues_and_alarms_keep_the_samples_names() {
    let t = template();
    for (resource, name) in [
        ("SmallQueue", "request-queue"),
        ("LargeQueue", "large-request-queue"),
        ("DeadLetterQueue", "dlq"),
        ("SmallScaleOutAlarm", "scale-out-alarm"),
        ("SmallScaleInAlarm", "scale-in-alarm"),
        ("LargeScaleOutAlarm", "large-scale-out-alarm"),
        ("LargeScaleInAlarm", "large-scale-in-alarm"),
        ("GpuTemperatureAlarm", "gpu-temperature-alarm"),
        ("GpuXidAlarm", "gpu-xid-error-alarm"),
        ("DeadLetterAlarm", "dlq-depth-alarm"),
    ] {
        let properties = &t["Resources"][resource]["Properties"];
        let given = properties.get("QueueName").or(properties.get("AlarmName")).unwrap();
        assert_eq!(given, &json!({"Fn::Sub": format!("${{AWS::StackName}}-{name}")}), "{resource}");
    }
    let temperature = &t["Resources"]["GpuTemperatureAlarm"]["Properties"];
    assert_eq!((&temperature["MetricName"], &temperature["Threshold"]), (&json!("TaskGPUTemperature"), &json!(90)));
}

/// The sample scales the small tier in with a 300 s cooldown (a parameter) and the large one with 600 s; so do the
/// template and README.
#[test]
fn scale_in_cooldowns_are_the_samples_and_readme_says_the_same() {
    let t = template();
    for (policy, parameter, default) in [
        ("SmallScaleInPolicy", "ScaleDownCooldownSeconds", 300),
        ("LargeScaleInPolicy", "LargeModelScaleDownCooldownSeconds", 600),
    ] {
        let cooldown = &t["Resources"][policy]["Properties"]["StepScalingPolicyConfiguration"]["Cooldown"];
        assert_eq!(cooldown, &json!({"Ref": parameter}), "{policy}");
        assert_eq!(t["Parameters"][parameter]["Default"], default, "{parameter}");
    }
    let readme = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md")).unwrap();
    assert!(readme.contains("`ScaleDownCooldownSeconds` 300 / `LargeModelScaleDownCooldownSeconds` 600"));
}

/// The sample's dashboard panels stay beside gpuinfer's: desired vs running tasks and GPU memory per tier, latency
/// percentiles, VRAM bytes, instance GPU allocation, and the 90 °C line on the temperature graph.
#[test]
fn the_dashboard_keeps_the_samples_panels() {
    let t = template();
    let body = t["Resources"]["Dashboard"]["Properties"]["DashboardBody"]["Fn::Sub"][0].as_str().unwrap().to_owned();
    let widgets: serde_json::Value = serde_json::from_str(&body).expect("the dashboard body is JSON");
    let series: Vec<String> = widgets["widgets"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|w| w["properties"]["metrics"].as_array().cloned().unwrap_or_default())
        .map(|metric| metric.to_string())
        .collect();
    let has = |needles: &[&str]| series.iter().any(|s| needles.iter().all(|needle| s.contains(needle)));
    for service in ["${SmallName}", "${LargeName}"] {
        for metric in ["DesiredTaskCount", "RunningTaskCount", "TaskGPUMemoryUtilization", "TaskGPUMemoryUsed"] {
            assert!(has(&[metric, service]), "no {metric} panel for {service}");
        }
    }
    for tier in ["small", "large"] {
        for stat in ["p50", "p95", "p99"] {
            assert!(has(&["InferenceLatency", tier, stat]), "no {stat} latency for {tier}");
        }
    }
    assert!(has(&["InstanceGPUUsageTotal"]) && has(&["InstanceGPULimit"]), "instance GPU allocation");
    let critical = widgets["widgets"].as_array().unwrap().iter().any(|w| {
        w["properties"]["metrics"].to_string().contains("TaskGPUTemperature")
            && w["properties"]["annotations"]["horizontal"][0]["value"] == 90
    });
    assert!(critical, "the temperature graph shows the 90 C line");
}

//! AWS's own rules for the deployment files and the SDK calls, one test per rule, each naming the AWS documentation
//! it comes from: a regression fails with the rule's name. cfn-lint and moto enforce a few of them; most, neither.

use std::time::Duration;

use crate::support::cfn::{of_type, statements, template};
use crate::support::moto;
use gpuinfer::{Queue, SqsQueue};
use serde_json::{Value, json};

fn read(path: &str) -> String {
    std::fs::read_to_string(format!("{}/{path}", env!("CARGO_MANIFEST_DIR"))).unwrap()
}

/// Every object key anywhere under `value`, lowercased, with the path that leads to it.
fn keys(value: &Value, path: &str, out: &mut Vec<(String, String)>) {
    match value {
        Value::Object(map) => {
            for (key, inner) in map {
                let here = format!("{path}.{key}");
                out.push((key.to_lowercase(), here.clone()));
                keys(inner, &here, out);
            }
        }
        Value::Array(items) => {
            for (i, inner) in items.iter().enumerate() {
                keys(inner, &format!("{path}[{i}]"), out);
            }
        }
        _ => {}
    }
}

/// ECS Developer Guide, "Amazon ECS task definition differences for Amazon ECS Managed Instances": "The following
/// task definition parameters are not valid in Amazon ECS Managed Instances tasks". Both tiers' task definitions
/// and the GPU auto-repair demo's run on Managed Instances.
#[test]
fn managed_instances_task_definitions_use_no_parameter_ecs_refuses_there() {
    const NOT_VALID: [&str; 18] = [
        "disablenetworking",
        "dnssearchdomains",
        "dnsservers",
        "dockerlabels",
        "dockersecurityoptions",
        "dockervolumeconfiguration",
        "ephemeralstorage",
        "extrahosts",
        "fsxwindowsfileservervolumeconfiguration",
        "hostname",
        "inferenceaccelerators",
        "ipcmode",
        "links",
        "maxswap",
        "proxyconfiguration",
        "sharedmemorysize",
        "swappiness",
        "tmpfs",
    ];
    let t = template();
    let mut definitions: Vec<(String, Value)> = of_type(&t, "AWS::ECS::TaskDefinition")
        .map(|(name, task)| (name.clone(), task["Properties"].clone()))
        .collect();
    assert_eq!(definitions.len(), 2);
    let demo: Value = serde_json::from_str(&read("demos/gpu-auto-repair/task-definition.json")).unwrap();
    definitions.push(("demos/gpu-auto-repair/task-definition.json".into(), demo));
    for (name, definition) in definitions {
        let mut found = Vec::new();
        keys(&definition, &name, &mut found);
        for (key, path) in found {
            let refused = NOT_VALID.contains(&key.as_str()) || key == "inferenceaccelerator";
            assert!(!refused, "{path}: ECS Managed Instances refuse this task-definition parameter");
            // "sourcePath volumes" are on the same list; a volume without a host path is ECS-managed and allowed.
            assert!(!(key == "sourcepath" && path.contains("Volumes")), "{path}: a sourcePath volume is refused");
        }
    }
}

/// ECS Developer Guide, task definition parameters, healthCheck: "You may specify between 0 and 300 seconds" of
/// startPeriod. A GPU task's cold start (weights + load) is longer, so the service's HealthCheckGracePeriodSeconds
/// ("ignores unhealthy … container health checks after a task has first started") must cover it: the AWS sample's
/// 600 s (small) and 1200 s (large), as parameters.
#[test]
fn a_cold_start_longer_than_the_health_check_start_period_is_covered_by_the_service_grace_period() {
    let t = template();
    for (service, task, parameter, default) in [
        ("SmallService", "SmallTaskDefinition", "HealthCheckGracePeriodSeconds", 600),
        ("LargeService", "LargeTaskDefinition", "LargeModelHealthCheckGracePeriodSeconds", 1200),
    ] {
        let start_period = &t["Resources"][task]["Properties"]["ContainerDefinitions"][0]["HealthCheck"]["StartPeriod"];
        assert!(start_period.as_u64().unwrap() <= 300, "{task}: startPeriod is at most 300 s");
        let grace = &t["Resources"][service]["Properties"]["HealthCheckGracePeriodSeconds"];
        assert_eq!(grace, &json!({"Ref": parameter}), "{service} takes its cold-start budget from {parameter}");
        assert_eq!(t["Parameters"][parameter]["Default"], default, "{parameter}: the AWS sample's cold-start budget");
    }
}

/// AWS::ECS::Service, DesiredCount: "For new services, if a desired count is not specified, a default value of 1 is
/// used … For existing services, if a desired count is not specified, it is omitted from the operation." A count in
/// the template is re-applied on every update that touches the service, undoing Application Auto Scaling; so it
/// is set (to 0) only until the first image exists, and auto scaling may not add tasks before then either.
#[test]
fn auto_scaled_services_leave_their_task_count_to_auto_scaling_once_the_image_exists() {
    let t = template();
    assert_eq!(t["Parameters"]["ImagePushed"]["Default"], "false", "a new stack has no image in ECR yet");
    assert_eq!(t["Conditions"]["ImageIsPushed"], json!({"Fn::Equals": [{"Ref": "ImagePushed"}, "true"]}));
    for (service, target) in [("SmallService", "SmallScalableTarget"), ("LargeService", "LargeScalableTarget")] {
        assert_eq!(
            t["Resources"][service]["Properties"]["DesiredCount"],
            json!({"Fn::If": ["ImageIsPushed", {"Ref": "AWS::NoValue"}, 0]}),
            "{service}: no DesiredCount once auto scaling owns the count"
        );
        let capacity = &t["Resources"][target]["Properties"];
        for bound in ["MinCapacity", "MaxCapacity"] {
            let value = &capacity[bound]["Fn::If"];
            assert_eq!(
                (&value[0], &value[2]),
                (&json!("ImageIsPushed"), &json!(0)),
                "{target}.{bound}: 0 until pushed"
            );
        }
    }
}

/// Lambda Developer Guide, "Visualize Lambda function invocations using AWS X-Ray": "Your function needs permission
/// to upload trace data to X-Ray … add the AWSXRayDaemonWriteAccess policy to the execution role." CreateFunction
/// with TracingConfig Active is refused without it.
#[test]
fn traced_lambdas_may_write_to_x_ray() {
    let t = template();
    for (name, function) in of_type(&t, "AWS::Lambda::Function") {
        if function["Properties"]["TracingConfig"]["Mode"] != "Active" {
            continue;
        }
        let role = function["Properties"]["Role"]["Fn::GetAtt"][0].as_str().unwrap();
        let managed = t["Resources"][role]["Properties"]["ManagedPolicyArns"].to_string();
        let inline = statements(&t["Resources"][role]).iter().map(|s| s["Action"].to_string()).collect::<String>();
        assert!(
            managed.contains("policy/AWSXRayDaemonWriteAccess")
                || (inline.contains("xray:PutTraceSegments") && inline.contains("xray:PutTelemetryRecords")),
            "{name} traces actively, but its role {role} may not write to X-Ray"
        );
    }
}

/// S3 API Reference, GetObject / HeadObject: "If you don't have the s3:ListBucket permission, Amazon S3 returns an
/// HTTP status code 403" for a key that does not exist. Every role that reads results (the worker's existence check,
/// GET and DELETE /results) must list the bucket, unconditioned (a GetObject carries no s3:prefix).
#[test]
fn roles_that_read_results_may_list_the_bucket_so_a_missing_result_is_404() {
    let t = template();
    for role in ["SmallTaskRole", "LargeTaskRole", "RouterRole"] {
        let grants = statements(&t["Resources"][role]);
        let lists = grants.iter().any(|s| {
            s["Action"].to_string().contains("s3:ListBucket")
                && s["Resource"] == json!({"Fn::GetAtt": ["ResultsBucket", "Arn"]})
                && s.get("Condition").is_none()
        });
        assert!(lists, "{role} reads results but may not s3:ListBucket the results bucket: pending reads get 403");
    }
}

/// A custom OutputDestination (another bucket, or an SQS queue URL) is passed to the router and the tasks, so
/// their roles must be able to use it (IAM denies what no statement allows).
#[test]
fn a_custom_output_destination_is_granted_to_every_role_that_uses_it() {
    let t = template();
    let conditional = |role: &str, condition: &str| -> Vec<String> {
        t["Resources"][role]["Properties"]["Policies"][0]["PolicyDocument"]["Statement"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|s| s["Fn::If"][0] == condition)
            .map(|s| s["Fn::If"][1]["Action"].to_string())
            .collect()
    };
    for role in ["SmallTaskRole", "LargeTaskRole", "RouterRole"] {
        let bucket = conditional(role, "OutputToOtherBucket").concat();
        assert!(bucket.contains("s3:GetObject") && bucket.contains("s3:PutObject"), "{role}: other bucket {bucket}");
    }
    for role in ["SmallTaskRole", "LargeTaskRole"] {
        assert!(conditional(role, "OutputToQueue").concat().contains("sqs:SendMessage"), "{role}: output queue");
    }
}

/// EventBridge: ECS "container instance state change" events fire on every task placement and agent event
/// ("These events do not indicate a problem"); GPU impairment comes as "ECS Container Instance Health Change" with
/// detail.overallStatus IMPAIRED. A log group target is named by the log group's ARN, not GetAtt Arn (which ends
/// in ":*").
#[test]
fn the_instance_health_rule_reports_impaired_instances_only_to_a_well_named_log_group() {
    let t = template();
    let rule = &t["Resources"]["InstanceHealthRule"]["Properties"];
    assert_eq!(rule["EventPattern"]["detail-type"], json!(["ECS Container Instance Health Change"]));
    assert_eq!(rule["EventPattern"]["detail"]["overallStatus"], json!(["IMPAIRED"]));
    for (name, rule) in of_type(&t, "AWS::Events::Rule") {
        for target in rule["Properties"]["Targets"].as_array().unwrap() {
            let arn = target["Arn"].to_string();
            assert!(!(arn.contains("LogGroup") && arn.contains("GetAtt")), "{name}: {arn} ends in ':*'");
        }
    }
}

/// SQS: a message moves to the dead-letter queue as it is; "MaximumMessageSize … up to 1,048,576 bytes". A DLQ
/// smaller than its sources cannot take their largest messages, and "the retention period of a dead-letter queue"
/// should be "longer than the retention period of the original queue".
#[test]
fn the_dead_letter_queue_takes_every_message_its_sources_can_hold_for_longer() {
    let t = template();
    let dlq = &t["Resources"]["DeadLetterQueue"]["Properties"];
    for (name, queue) in of_type(&t, "AWS::SQS::Queue") {
        if queue["Properties"]["RedrivePolicy"].is_null() {
            continue;
        }
        let source = &queue["Properties"];
        let size = |q: &Value| q["MaximumMessageSize"].as_u64().unwrap_or(262_144);
        assert!(size(dlq) >= size(source), "{name} holds larger messages than its dead-letter queue");
        let retention = |q: &Value| q["MessageRetentionPeriod"].as_u64().unwrap_or(345_600);
        assert!(retention(dlq) > retention(source), "{name} keeps messages as long as its dead-letter queue");
    }
}

/// Lambda, reserved concurrency: "You can reserve up to the Unreserved account concurrency value … minus 100", and
/// "New AWS accounts have reduced concurrency … quotas": a fixed reservation fails stack creation there.
#[test]
fn no_lambda_reserves_concurrency_unless_asked() {
    let t = template();
    for (name, function) in of_type(&t, "AWS::Lambda::Function") {
        let reserved = &function["Properties"]["ReservedConcurrentExecutions"];
        assert!(
            reserved.is_null() || reserved["Fn::If"][2] == json!({"Ref": "AWS::NoValue"}),
            "{name} reserves {reserved} whatever the account's quota"
        );
    }
    assert_eq!(t["Parameters"]["RouterReservedConcurrency"]["Default"], "");
}

/// AWS::Lambda::Function Code: "Changes to a deployment package in Amazon S3 … are not detected automatically
/// during stack updates. To update the function code, change the object key or version in the template." The
/// stack takes an object version, with the architecture it was built for (Architectures), and only the stack
/// changes them, together: the build that uploads a zip deploys nothing, and may not (a zip pushed to a live
/// function ahead of a failed deploy, or of another architecture than the function's, is a function that breaks).
#[test]
fn a_new_lambda_zip_reaches_the_functions_only_through_the_stack() {
    let t = template();
    for (name, function) in of_type(&t, "AWS::Lambda::Function") {
        let code = &function["Properties"]["Code"];
        assert_eq!(code["S3ObjectVersion"]["Fn::If"][1], json!({"Ref": "RouterCodeVersion"}), "{name}");
        assert_eq!(function["Properties"]["Architectures"], json!([{"Ref": "LambdaArchitecture"}]), "{name}");
    }
    let grants = statements(&t["Resources"]["BuildRole"]);
    assert!(!grants.iter().any(|s| s["Action"].to_string().contains("lambda:")), "{grants:?}");
    assert!(!read("buildspec.yml").contains("update-function-code"), "buildspec.yml deploys nothing");
}

/// Lambda Developer Guide, "How Lambda handles errors and retries with asynchronous invocation": a function error is
/// run two more times by default (MaximumRetryAttempts, 0 to 2, in the function's EventInvokeConfig), then the event
/// goes to its dead-letter queue if it has one ("Retaining records of asynchronous invocations"; the execution role then needs
/// sqs:SendMessage there). The functions EventBridge schedules (invoked asynchronously) redo a failed minute the
/// next minute: retries off, and no dead-letter target, so the requests' DLQ, whose alarm means a poison request,
/// receives requests only. A function with a dead-letter queue must be allowed to send to it.
#[test]
fn scheduled_functions_retry_nothing_and_keep_failed_minutes_out_of_the_requests_dead_letter_queue() {
    let t = template();
    let scheduled: Vec<String> = of_type(&t, "AWS::Events::Rule")
        .flat_map(|(_, rule)| rule["Properties"]["Targets"].as_array().unwrap().clone())
        .filter_map(|target| target["Arn"]["Fn::GetAtt"][0].as_str().map(str::to_owned))
        .filter(|id| t["Resources"][id]["Type"] == "AWS::Lambda::Function")
        .collect();
    assert!(scheduled.contains(&"RouterFunction".to_owned()) && scheduled.contains(&"ScalerFunction".to_owned()));
    for function in &scheduled {
        let retries = of_type(&t, "AWS::Lambda::EventInvokeConfig")
            .find(|(_, config)| config["Properties"]["FunctionName"] == json!({"Ref": function}))
            .map(|(_, config)| config["Properties"]["MaximumRetryAttempts"].clone());
        assert_eq!(retries, Some(json!(0)), "{function}: retries off");
        assert!(t["Resources"][function]["Properties"].get("DeadLetterConfig").is_none(), "{function}");
    }
    for (name, function) in of_type(&t, "AWS::Lambda::Function") {
        let Some(target) = function["Properties"].get("DeadLetterConfig").map(|c| &c["TargetArn"]) else {
            continue;
        };
        let role = function["Properties"]["Role"]["Fn::GetAtt"][0].as_str().unwrap();
        let sends = statements(&t["Resources"][role]).iter().any(|s| {
            s["Action"].to_string().contains("sqs:SendMessage")
                && s["Resource"].to_string().contains(&target.to_string())
        });
        assert!(
            sends,
            "{name} sends failed invocations to {target}, but its role {role} may not sqs:SendMessage there"
        );
    }
}

/// CodeBuild User Guide, "Allow CodeBuild to interact with other AWS services": the service role's policy for an S3
/// source has s3:GetObject and s3:GetObjectVersion on the object and s3:GetBucketAcl and s3:GetBucketLocation on
/// the bucket. Both projects build from container-source.zip in ArtifactBucket.
#[test]
fn the_build_role_may_read_its_s3_source_as_codebuild_documents() {
    let t = template();
    for project in ["Build", "RouterBuild"] {
        let source = &t["Resources"][project]["Properties"]["Source"];
        assert_eq!(source["Type"], "S3", "{project}");
        assert_eq!(source["Location"], json!({"Fn::Sub": "${ArtifactBucket}/container-source.zip"}), "{project}");
    }
    let grants = statements(&t["Resources"]["BuildRole"]);
    let on = |action: &str, resource: &str| {
        grants.iter().any(|s| s["Action"].to_string().contains(action) && s["Resource"].to_string().contains(resource))
    };
    for action in ["s3:GetObject", "s3:GetObjectVersion"] {
        assert!(on(action, "${ArtifactBucket}/container-source.zip"), "BuildRole lacks {action} on the source zip");
    }
    for action in ["s3:GetBucketAcl", "s3:GetBucketLocation"] {
        assert!(on(action, "s3:::${ArtifactBucket}\""), "BuildRole lacks {action} on the artifact bucket");
    }
}

/// AWS General Reference, "AWS Management Console endpoints": the console is console.aws.amazon.com (regional
/// endpoints <region>.console.aws.amazon.com), not console.<URL suffix> (console.amazonaws.com does not serve it);
/// the China Regions' console is console.amazonaws.cn and GovCloud's console.amazonaws-us-gov.com.
#[test]
fn the_dashboard_url_names_the_consoles_real_host_in_each_partition() {
    let t = template();
    let url = &t["Outputs"]["DashboardUrl"]["Value"]["Fn::Sub"];
    assert!(url[0].as_str().unwrap().starts_with("https://${Console}/cloudwatch/"), "{url}");
    assert_eq!(url[1]["Console"], json!({"Fn::FindInMap": ["Console", {"Ref": "AWS::Partition"}, "Host"]}));
    let hosts = &t["Mappings"]["Console"];
    assert_eq!(hosts["aws"]["Host"], "console.aws.amazon.com");
    assert_eq!(hosts["aws-cn"]["Host"], "console.amazonaws.cn");
    assert_eq!(hosts["aws-us-gov"]["Host"], "console.amazonaws-us-gov.com");
}

/// CloudFormation User Guide, AWS::Lambda::Function Code: "S3Key: The Amazon S3 key of the deployment package",
/// which must exist when the function is created. A stack created before its zip is built (RouterCodeBuilt false)
/// creates no function, nothing that points at one (API integrations, routes, the stage, permissions, the
/// schedule), and no output that names the API as if it served.
#[test]
fn nothing_that_runs_the_lambda_zip_is_created_before_the_zip_is_built() {
    let t = template();
    assert_eq!(t["Parameters"]["RouterCodeBuilt"]["Default"], "false");
    assert_eq!(t["Conditions"]["RouterCodeIsBuilt"], json!({"Fn::Equals": [{"Ref": "RouterCodeBuilt"}, "true"]}));
    let needs_code = |resource: &Value| {
        let text = resource.to_string();
        ["RouterFunction", "ScalerFunction", "RouterIntegration", "OpenAiIntegration", "ScalerSchedule"]
            .iter()
            .any(|id| text.contains(&format!("\"{id}\"")))
    };
    for (name, resource) in t["Resources"].as_object().unwrap() {
        let is_function = resource["Type"] == "AWS::Lambda::Function";
        let is_stage = resource["Type"] == "AWS::ApiGatewayV2::Stage";
        if is_function || is_stage || needs_code(&resource["Properties"]) {
            assert_eq!(resource["Condition"], "RouterCodeIsBuilt", "{name} needs the Lambda zip");
        }
    }
    for output in ["InferenceApiUrl", "ResultsApiUrl"] {
        assert_eq!(t["Outputs"][output]["Condition"], "RouterCodeIsBuilt", "{output}");
    }
}

/// CodeBuild runs a build on a host of its environment type: the Lambda zip for arm64 needs an ARM_CONTAINER with an
/// aarch64 image (no emulation), the inference image (x86_64 GPU instances) a LINUX_CONTAINER.
#[test]
fn each_build_runs_on_a_host_of_the_architecture_it_builds_for() {
    let t = template();
    let image = &t["Resources"]["Build"]["Properties"]["Environment"];
    assert_eq!(image["Type"], "LINUX_CONTAINER");
    assert!(image["Image"].as_str().unwrap().contains("x86_64"));
    let router = &t["Resources"]["RouterBuild"]["Properties"]["Environment"];
    assert_eq!(router["Type"], json!({"Fn::If": ["LambdaOnArm", "ARM_CONTAINER", "LINUX_CONTAINER"]}));
    let images = &router["Image"]["Fn::If"];
    assert!(images[1].as_str().unwrap().contains("aarch64") && images[2].as_str().unwrap().contains("x86_64"));
    assert_eq!(t["Conditions"]["LambdaOnArm"], json!({"Fn::Equals": [{"Ref": "LambdaArchitecture"}, "arm64"]}));
}

/// ECS sends SIGKILL stopTimeout seconds after SIGTERM (Managed Instances: "The maximum value is 86400 seconds"):
/// the worker's drain must end, and give back what it could not finish, before then.
#[test]
fn the_worker_drain_ends_before_the_container_stop_timeout() {
    let t = template();
    for tier in ["Small", "Large"] {
        let tiers = &t["Mappings"]["Tiers"][tier];
        let (stop, drain) = (tiers["StopTimeout"].as_u64().unwrap(), tiers["DrainTimeout"].as_u64().unwrap());
        assert!(stop <= 86_400 && drain + 10 <= stop, "{tier}: drain {drain} s must end well before stop {stop} s");
        let task = &t["Resources"][format!("{tier}TaskDefinition")]["Properties"]["ContainerDefinitions"][0];
        let env = task["Environment"].to_string();
        assert!(env.contains("DRAIN_TIMEOUT_SECONDS") && env.contains("DrainTimeout"), "{tier}: {env}");
    }
}

/// A tier whose task starts keep failing (an image not yet in ECR) is told, per tier, by an alarm on the scaler's
/// TaskStartsFailing metric.
#[test]
fn failing_task_starts_raise_an_alarm_per_tier() {
    let t = template();
    for service in ["SmallService", "LargeService"] {
        let alarmed = of_type(&t, "AWS::CloudWatch::Alarm").any(|(_, alarm)| {
            let p = &alarm["Properties"];
            p["MetricName"] == "TaskStartsFailing"
                && p["Dimensions"].to_string().contains(service)
                && p["AlarmActions"] == json!([{"Ref": "AlarmTopic"}])
        });
        assert!(alarmed, "{service}: no TaskStartsFailing alarm");
    }
}

/// Docker Hub limits anonymous pulls, and CodeBuild hosts are shared: base images come from ECR Public where it has
/// a copy, and the vLLM base (which it has not) can come through the stack's ECR pull-through cache, with the same
/// tag as the Dockerfile's default.
#[test]
fn base_images_avoid_anonymous_docker_hub_pulls_where_a_copy_exists() {
    let dockerfile = read("Dockerfile");
    let default_vllm = dockerfile
        .lines()
        .find_map(|line| line.strip_prefix("ARG VLLM_IMAGE="))
        .expect("the vLLM base image is a build argument");
    for line in dockerfile.lines().filter(|l| l.starts_with("FROM ")) {
        let image = line.split_whitespace().nth(1).unwrap();
        assert!(
            image.starts_with("public.ecr.aws/") || image == "${VLLM_IMAGE}" || image == "scratch",
            "{line}: pulled anonymously from Docker Hub"
        );
    }
    let t = template();
    let value = t["Resources"]["Build"]["Properties"]["Environment"]["EnvironmentVariables"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["Name"] == "VLLM_IMAGE")
        .unwrap()["Value"]["Fn::If"]
        .clone();
    assert_eq!(value[2], default_vllm);
    assert!(value[1]["Fn::Sub"].as_str().unwrap().ends_with(&format!("/gpuinfer-docker-hub/{default_vllm}")));
    assert_eq!(t["Resources"]["DockerHubCache"]["Properties"]["EcrRepositoryPrefix"], "gpuinfer-docker-hub");
}

/// CloudFormation, AWS::ApiGatewayV2::Integration TimeoutInMillis: "between 50 and 30,000 milliseconds for HTTP
/// APIs". Creating a batch checks and enqueues every line, and the poll that finds it done builds its files: the
/// /v1 routes get the longest an HTTP API allows, and the router Lambda's own timeout is no shorter than any
/// integration that calls it (else API Gateway waits for a function already stopped).
#[test]
fn the_batch_api_gets_the_longest_http_api_integration_timeout_and_the_lambda_outlives_every_integration() {
    let t = template();
    let lambda_seconds = t["Resources"]["RouterFunction"]["Properties"]["Timeout"].as_u64().unwrap();
    let integrations: Vec<(String, u64)> = of_type(&t, "AWS::ApiGatewayV2::Integration")
        .map(|(name, i)| (name.clone(), i["Properties"]["TimeoutInMillis"].as_u64().unwrap_or(30_000)))
        .collect();
    for (name, millis) in &integrations {
        assert!((50..=30_000).contains(millis), "{name}: TimeoutInMillis {millis} is outside 50–30,000");
        assert!(
            lambda_seconds * 1000 >= *millis,
            "{name} waits {millis} ms for a Lambda that stops at {lambda_seconds} s"
        );
    }
    let route = of_type(&t, "AWS::ApiGatewayV2::Route")
        .find(|(_, r)| r["Properties"]["RouteKey"] == "ANY /v1/{proxy+}")
        .map(|(_, r)| r["Properties"].clone())
        .expect("a route for the OpenAI-compatible /v1 API");
    assert_eq!(route["Target"], json!({"Fn::Sub": "integrations/${OpenAiIntegration}"}));
    assert_eq!(t["Resources"]["OpenAiIntegration"]["Properties"]["TimeoutInMillis"], 30_000);
}

/// S3 User Guide, "Multipart upload API and permissions": each step of a multipart upload is authorized by
/// s3:PutObject, but aborting one needs s3:AbortMultipartUpload; and "Configuring a bucket lifecycle configuration to
/// delete incomplete multipart uploads" (AbortIncompleteMultipartUpload), so the parts of an upload that could be
/// neither completed nor aborted are not kept (and billed) forever.
#[test]
fn the_router_may_abort_a_multipart_upload_and_the_bucket_drops_parts_left_behind() {
    let t = template();
    let grants = statements(&t["Resources"]["RouterRole"]);
    let aborts = grants.iter().any(|s| {
        let actions = s["Action"].to_string();
        actions.contains("s3:PutObject") && actions.contains("s3:AbortMultipartUpload")
    });
    assert!(aborts, "the router writes Batch API files in parts: it needs s3:PutObject and s3:AbortMultipartUpload");
    let rules = t["Resources"]["ResultsBucket"]["Properties"]["LifecycleConfiguration"]["Rules"].as_array().unwrap();
    let results = rules.iter().find(|r| r["Prefix"] == "results/").expect("a lifecycle rule for results/");
    assert!(results["AbortIncompleteMultipartUpload"]["DaysAfterInitiation"].as_u64().is_some(), "{results}");
}

/// Lambda API Reference, Invoke: "For synchronous invocations, the maximum payload size is 6 MB", and a binary body
/// crosses API Gateway base64-encoded (4 bytes for every 3). A file download over the limit is redirected to S3
/// (tests/it/lambda_router.rs checks the redirect); one under it must fit the response once encoded, with room for
/// the headers. The same arithmetic gives the part size docs/api.md tells Uploads API users (4 MiB).
#[test]
fn a_file_the_router_serves_through_lambda_fits_lambdas_6_mb_response_once_base64_encoded() {
    const LAMBDA_PAYLOAD_BYTES: u64 = 6_000_000;
    let encoded = gpuinfer::LAMBDA_DOWNLOAD_LIMIT.div_ceil(3) * 4;
    assert!(encoded + 64 * 1024 < LAMBDA_PAYLOAD_BYTES, "{encoded} bytes encoded");
    assert!(
        read("docs/api.md").contains("part_size=4 * 1024 * 1024"),
        "docs/api.md gives Uploads API users a part size that fits"
    );
}

/// SQS API Reference, ReceiveMessage: MaxNumberOfMessages "Valid values: 1 to 10", WaitTimeSeconds from 0 to 20;
/// SQS refuses a call outside them (InvalidParameterValue, as moto does). A worker asks for its free slots plus as
/// many messages held ahead as its limit (`src/worker/mod.rs`), far over 10 with a limit of 64, and waits as long as it
/// has nothing to do: the SQS adapter brings every call into range.
#[tokio::test]
#[ignore = "needs moto: scripts/test.sh"]
async fn receive_message_asks_for_1_to_10_messages_and_waits_at_most_20_seconds() {
    let url = moto::queue_with_dlq(&moto::unique("receive-rule"), 30, 3).await.0;
    let queue = SqsQueue::new(moto::sqs().await, url.clone(), None);
    moto::send_all(&url, &(0..30).map(|i| format!("message {i}")).collect::<Vec<_>>()).await;
    let most = queue.receive(64 + 64, Duration::from_secs(60)).await.expect("a receive SQS accepts");
    let least = queue.receive(0, Duration::ZERO).await.expect("a receive SQS accepts");
    assert_eq!((most.len(), least.len()), (10, 1), "asked for 10 (the most) and for 1 (the least)");
}

/// SQS API Reference, ReceiveMessage: VisibilityTimeout, "If not specified, the default visibility timeout for the
/// queue is used, which is 30 seconds". A worker renews a running message on its own VISIBILITY_TIMEOUT's schedule (a
/// third of it; 300 s on the small tier): on a queue of a shorter default, a message it had not asked to hide for
/// as long would come back, and run twice, before the first renewal. It asks on every receive.
#[tokio::test]
#[ignore = "needs moto: scripts/test.sh"]
async fn a_received_message_stays_hidden_for_the_workers_visibility_timeout_whatever_the_queues_default() {
    let url = moto::queue_with_dlq(&moto::unique("visibility-rule"), 1, 3).await.0;
    let client = moto::sqs().await;
    let ours = SqsQueue::new(client.clone(), url.clone(), None).hiding_received_for(Duration::from_secs(60));
    let queues_default = SqsQueue::new(client, url, None);
    ours.send("first").await.unwrap();
    ours.send("second").await.unwrap();
    let mut received = ours.receive(1, Duration::ZERO).await.unwrap();
    received.extend(queues_default.receive(1, Duration::ZERO).await.unwrap());
    assert_eq!(received.len(), 2);
    tokio::time::sleep(Duration::from_millis(2500)).await;
    let again: Vec<String> = ours.receive(10, Duration::ZERO).await.unwrap().into_iter().map(|m| m.body).collect();
    assert_eq!(again, [received[1].body.clone()], "back after the queue's 1 s: only the one received without asking");
}

/// ECS task definition parameters, container definition `user`: "The user to use inside the container. This parameter
/// maps to User in the docker container create command and the --user option to docker run", and "When running
/// tasks using the host network mode, don't run containers using the root user (UID 0)". A `User` would replace the
/// image's start user, root, and with it the step where entrypoint.sh opens the large tier's /dev/shm before it
/// drops to uid 1000 (tests/it/entrypoint.rs runs that step as root): the tiers name none, and as their containers
/// start as root, neither shares the host's network. `user` is not among the parameters ECS Managed Instances
/// refuse (their "task definition differences" page; the test above), so naming it or not is the template's choice.
#[test]
fn containers_that_start_as_root_to_open_shared_memory_name_no_user_and_keep_their_own_network() {
    let t = template();
    let mut checked = 0;
    for (name, task) in of_type(&t, "AWS::ECS::TaskDefinition") {
        let p = &task["Properties"];
        assert_eq!(p["NetworkMode"], "awsvpc", "{name}: a container that starts as root must not use host networking");
        for container in p["ContainerDefinitions"].as_array().unwrap() {
            assert!(
                container.get("User").is_none(),
                "{name}: a User replaces the image's root start, so /dev/shm stays root-owned 0755 and tensor \
                 parallelism fails; drop it (entrypoint.sh drops to uid 1000 itself)"
            );
            checked += 1;
        }
    }
    assert_eq!(checked, 2, "the small and the large tier");
    let dockerfile = read("Dockerfile");
    let runtime = dockerfile.split(" AS runtime").nth(1).expect("the Dockerfile's runtime stage");
    let last_user = runtime.lines().rfind(|line| line.starts_with("USER ")).expect("the runtime stage names its user");
    assert_eq!(last_user, "USER 0", "the image starts as root, whatever user its base image ends on");
}

/// ECS Developer Guide, "Use bind mounts with Amazon ECS": a task volume with no host path is an empty data volume
/// made for the task, and "By default, the volume permissions are set to 0755 and the owner as root". The page
/// changes them through a Dockerfile VOLUME over a directory the image prepares, which does not reach /dev (Docker
/// sets up the container's /dev itself when it starts); `dockerVolumeConfiguration` is refused on Managed Instances
/// (the test above). So entrypoint.sh, started as root, makes the shared-memory directory (/dev/shm unless told
/// otherwise) 1777 before it drops to uid 1000, and the large tier mounts its volume exactly there.
#[test]
fn the_large_tiers_shared_memory_volume_comes_root_owned_so_the_entrypoint_opens_it_before_dropping_root() {
    let t = template();
    let large = &t["Resources"]["LargeTaskDefinition"]["Properties"];
    let volume = large["Volumes"].as_array().unwrap().iter().find(|v| v["Name"] == "shm").expect("the shm volume");
    assert!(volume.get("Host").is_none(), "no host path: ECS makes the volume on the instance's disk");
    assert!(volume.get("DockerVolumeConfiguration").is_none(), "refused on Managed Instances");
    let mounts = large["ContainerDefinitions"][0]["MountPoints"].as_array().unwrap();
    let mount = mounts.iter().find(|m| m["SourceVolume"] == "shm").expect("the shm volume is mounted");
    assert_eq!((&mount["ContainerPath"], &mount["ReadOnly"]), (&json!("/dev/shm"), &json!(false)));

    let entrypoint = read("entrypoint.sh");
    assert!(entrypoint.contains(r#"SHARED_MEMORY_DIR="${SHARED_MEMORY_DIR:-/dev/shm}""#), "/dev/shm by default");
    let open = entrypoint.find(r#"chmod 1777 "$SHARED_MEMORY_DIR""#).expect("the entrypoint opens the directory");
    let drop = entrypoint.find("exec setpriv --reuid=").expect("the entrypoint drops root");
    assert!(open < drop, "the directory is opened while the entrypoint is still root");
}

/// AWS::ECS::TaskDefinition KernelCapabilities: "When the add request parameter and the drop request parameter are
/// both empty, the container capabilities are all of the default Docker capabilities." The entrypoint's root step
/// needs CHOWN (MODEL_DIR, HOME) and SETUID and SETGID (setpriv) and nothing else, all in Docker's default set
/// (tests/it/entrypoint.rs starts it with exactly that set): the tiers add no capability and are not privileged.
#[test]
fn the_entrypoints_root_step_needs_no_capability_beyond_dockers_default_set() {
    let t = template();
    for (name, task) in of_type(&t, "AWS::ECS::TaskDefinition") {
        for container in task["Properties"]["ContainerDefinitions"].as_array().unwrap() {
            assert!(container["Privileged"] != true, "{name}: privileged");
            assert!(container["LinuxParameters"].get("Capabilities").is_none(), "{name}: adds or drops capabilities");
        }
    }
}

/// Bedrock User Guide, "Prerequisites for inference profiles": a role restricted to an inference profile needs
/// bedrock:InvokeModel on the profile and, "if you specify an inference profile in the Resource field …, you must
/// also specify the foundation model in each Region associated with it"; Bedrock API Reference, Converse: "This
/// operation requires permission for the bedrock:InvokeModel action". The RouterRole grants exactly what its
/// function's BEDROCK_MODEL_ID needs: for the default (Nova Micro's profile of the stack's Region, whichever geography's,
/// or the model where no profile serves it) and any other profile id, the profile in the stack's Region and the model
/// in every Region; for a model id, that model in the stack's Region only.
#[test]
fn the_router_may_invoke_its_classifier_profile_and_the_model_in_each_region_the_profile_routes_to() {
    use crate::support::cfn::{ACCOUNT, REGION, Stack};
    let granted = |overrides: &[(&str, &str)]| {
        let mut parameters = vec![("ModelName", "small-model"), ("LargeModelName", "large-model")];
        parameters.extend_from_slice(overrides);
        let stack = Stack::new("classify", &parameters);
        let model_id = stack.environment("RouterFunction").into_iter().find(|(name, _)| name == "BEDROCK_MODEL_ID");
        let statements: Vec<Value> = stack
            .role_policies("RouterRole")
            .into_iter()
            .flat_map(|(_, document)| document["Statement"].as_array().unwrap().clone())
            .filter(|statement| statement["Action"].to_string().contains("bedrock:"))
            .collect();
        assert_eq!(statements.len(), 1, "one statement grants Bedrock: {statements:#?}");
        assert_eq!(
            (&statements[0]["Effect"], &statements[0]["Action"]),
            (&json!("Allow"), &json!("bedrock:InvokeModel"))
        );
        (model_id.unwrap().1, statements[0]["Resource"].clone())
    };
    let profile = |id: &str| format!("arn:aws:bedrock:{REGION}:{ACCOUNT}:inference-profile/{id}");
    let everywhere = |model: &str| format!("arn:aws:bedrock:*::foundation-model/{model}");

    let (model_id, resources) = granted(&[]);
    assert_eq!(model_id, "", "the default: the router picks Nova Micro's profile of its Region");
    assert_eq!(
        resources,
        json!([profile("*.amazon.nova-micro-v1:0"), everywhere("amazon.nova-micro-v1:0")]),
        "the default"
    );

    let (model_id, resources) = granted(&[("BedrockModelId", "us.amazon.nova-lite-v1:0")]);
    assert_eq!(resources, json!([profile(&model_id), everywhere("amazon.nova-lite-v1:0")]), "another profile");

    let (model_id, resources) = granted(&[("BedrockModelId", "amazon.nova-micro-v1:0")]);
    let here = format!("arn:aws:bedrock:{REGION}::foundation-model/{model_id}");
    assert_eq!(resources, json!(here), "a model id: that model, in the stack's Region alone");
}

/// Service Authorization Reference, "Actions, resources, and condition keys for Amazon Elastic Container Service":
/// DescribeServices and UpdateService take the resource type `service`,
/// `arn:${Partition}:ecs:${Region}:${Account}:service/${ClusterName}/${ServiceName}`. The router's wake on arrival
/// gets exactly those two actions on exactly the two tiers' services; the scaler's Spot fallback UpdateService on
/// exactly the fallback services (a `Ref` to an AWS::ECS::Service is its ARN), and only where a tier falls back; no
/// other role may set a desired count (Application Auto Scaling acts through its service-linked role), and the router
/// wakes only once an image exists (a task could not start before).
#[test]
fn only_the_router_and_the_spot_fallback_may_set_a_desired_count_each_on_its_own_services() {
    let t = template();
    let service_arn = |service: &str| {
        json!({"Fn::Sub": format!(
            "arn:${{AWS::Partition}}:ecs:${{AWS::Region}}:${{AWS::AccountId}}:service/${{Cluster}}/${{{service}.Name}}"
        )})
    };
    let wake: Vec<&Value> =
        statements(&t["Resources"]["RouterRole"]).into_iter().filter(|s| s["Sid"] == "WakeOnArrival").collect();
    assert_eq!(wake.len(), 1, "RouterRole has one WakeOnArrival statement");
    assert_eq!(wake[0]["Action"], json!(["ecs:DescribeServices", "ecs:UpdateService"]));
    assert_eq!(wake[0]["Resource"], json!([service_arn("SmallService"), service_arn("LargeService")]));
    for (name, role) in of_type(&t, "AWS::IAM::Role") {
        for statement in statements(role) {
            let actions = statement["Action"].to_string();
            let sets_count = actions.contains("ecs:UpdateService") || actions.contains("ecs:*");
            let fallback = name == "ScalerRole" && statement["Sid"] == "FallbackTaskCount";
            assert!(
                !sets_count || (name == "RouterRole" && statement["Sid"] == "WakeOnArrival") || fallback,
                "{name}: {statement}"
            );
            if fallback {
                assert_eq!(statement["Action"], "ecs:UpdateService");
                let only = |tier: &str| json!({"Fn::If": [format!("{tier}FallsBack"), {"Ref": format!("{tier}FallbackService")}, {"Ref": "AWS::NoValue"}]});
                assert_eq!(statement["Resource"], json!([only("Small"), only("Large")]));
            }
        }
    }
    let env = &t["Resources"]["RouterFunction"]["Properties"]["Environment"]["Variables"];
    assert_eq!(env["WAKE_ON_ARRIVAL"], json!({"Fn::If": ["ImageIsPushed", "true", "false"]}));
    assert_eq!(
        env["SERVICE_NAME"],
        t["Resources"]["ScalerFunction"]["Properties"]["Environment"]["Variables"]["SERVICE_NAME"]
    );
}

/// S3 API Reference, HeadObject: "you must have the s3:GetObject permission" (HeadObject has no action of its own);
/// PutObject needs s3:PutObject. The cancel mark (`results/cancels.mark`) is written by the router after a cancel
/// and read with HeadObject by every worker, so it lies under the results prefix, where RouterRole may put objects
/// and both task roles may get them (a grant on `results/*`, not on the bucket's other keys).
#[test]
fn the_cancel_mark_lies_where_the_router_may_write_it_and_the_workers_may_head_it() {
    let location = gpuinfer::S3Location::parse("s3://results-bucket/results/").unwrap();
    let key = location.cancel_mark_key();
    assert!(key.starts_with("results/") && !key.ends_with(".json"), "{key}: beside the results, not one of them");
    let t = template();
    let results = json!({"Fn::Sub": "${ResultsBucket.Arn}/results/*"});
    let grants = |role: &str, action: &str| {
        statements(&t["Resources"][role])
            .iter()
            .any(|s| s["Effect"] == "Allow" && s["Action"].to_string().contains(action) && s["Resource"] == results)
    };
    assert!(grants("RouterRole", "s3:PutObject"), "RouterRole may not write the cancel mark");
    for role in ["SmallTaskRole", "LargeTaskRole"] {
        assert!(grants(role, "s3:GetObject"), "{role} may not HeadObject the cancel mark");
    }
}

/// EventBridge API Reference, Target: `Input` is "valid JSON text passed to the target", and "nothing from the event
/// itself is passed"; Lambda Developer Guide, "Invoking a Lambda function on a schedule": EventBridge invokes a
/// function only with a resource-based permission for `events.amazonaws.com`, whose `SourceArn` should be the rule.
/// The upkeep's rule passes the router the constant event it tells from an API Gateway request (lambda_router.rs
/// invokes the function with this very input), and may invoke the router's function and nothing else.
#[test]
fn the_upkeep_schedule_hands_the_router_its_upkeep_event_and_may_invoke_only_the_router() {
    let t = template();
    let rule = &t["Resources"]["UpkeepSchedule"];
    assert_eq!(rule["Properties"]["ScheduleExpression"], "rate(1 minute)");
    let target = &rule["Properties"]["Targets"][0];
    assert_eq!(target["Arn"], json!({"Fn::GetAtt": ["RouterFunction", "Arn"]}));
    let input: Value = serde_json::from_str(target["Input"].as_str().unwrap()).expect("Input is JSON text");
    assert_eq!(input, upkeep_input(), "the input lambda_router.rs invokes the function with");
    let permission = &t["Resources"]["UpkeepInvokePermission"]["Properties"];
    assert_eq!(
        (&permission["FunctionName"], &permission["Principal"], &permission["SourceArn"]),
        (
            &json!({"Ref": "RouterFunction"}),
            &json!("events.amazonaws.com"),
            &json!({"Fn::GetAtt": ["UpkeepSchedule", "Arn"]})
        )
    );
}

/// The upkeep rule's constant input, as the template gives it.
pub(crate) fn upkeep_input() -> Value {
    let t = template();
    let input = t["Resources"]["UpkeepSchedule"]["Properties"]["Targets"][0]["Input"].as_str().unwrap().to_owned();
    serde_json::from_str(&input).unwrap()
}

/// ECS Developer Guide, "Pass Secrets Manager secrets through Amazon ECS environment variables": the task execution
/// role needs `secretsmanager:GetSecretValue` on each secret a container's `Secrets` names (and kms:Decrypt for a
/// customer managed key). Secrets Manager User Guide, GetSecretValue: the same action on the secret for a function
/// that reads it itself. The OpenAI webhook's secret reaches the workers through ECS and the router through its own
/// GetSecretValue (OPENAI_WEBHOOK_SECRET_ID), each granted on exactly that secret.
#[test]
fn the_openai_webhook_secret_reaches_the_workers_and_the_router_each_through_a_grant_on_it() {
    let t = template();
    let secret = json!({"Ref": "OpenAiWebhookSecret"});
    let reads = |role: &str| -> Vec<Value> {
        statements(&t["Resources"][role])
            .into_iter()
            .filter(|s| s["Effect"] == "Allow" && s["Action"] == "secretsmanager:GetSecretValue")
            .flat_map(|s| match &s["Resource"] {
                Value::Array(resources) => resources.clone(),
                one => vec![one.clone()],
            })
            .collect()
    };
    for task in ["SmallTaskDefinition", "LargeTaskDefinition"] {
        let properties = &t["Resources"][task]["Properties"];
        let role = properties["ExecutionRoleArn"]["Fn::GetAtt"][0].as_str().unwrap();
        for named in properties["ContainerDefinitions"][0]["Secrets"].as_array().unwrap() {
            assert!(reads(role).contains(&named["ValueFrom"]), "{task}: {role} may not read {named}");
        }
        let names = properties["ContainerDefinitions"][0]["Secrets"].to_string();
        assert!(names.contains("OPENAI_WEBHOOK_SECRET"), "{task} gets no OPENAI_WEBHOOK_SECRET");
    }
    let router = &t["Resources"]["RouterFunction"]["Properties"]["Environment"]["Variables"];
    assert_eq!(router["OPENAI_WEBHOOK_SECRET_ID"], secret);
    assert!(router.get("OPENAI_WEBHOOK_SECRET").is_none(), "the function's environment does not hold the key");
    assert!(reads("RouterRole").contains(&secret), "RouterRole may not read the OpenAI webhook secret");
}

/// CloudFormation User Guide, AWS::ApiGatewayV2::Route, AuthorizationType: "For HTTP APIs, valid values are NONE for
/// open access, JWT for using JSON Web Tokens, AWS_IAM for using AWS IAM permissions, and CUSTOM for using a Lambda
/// authorizer"; API Gateway Developer Guide, "Control access to HTTP APIs with IAM authorization": IAM authorization
/// is enabled route by route. So the /v1 route takes API keys (NONE at API Gateway: OpenAI's clients cannot sign)
/// while the pipeline's routes keep ApiAuthType; and it is open at API Gateway only where the router is given the key
/// store to check every /v1 request against.
#[test]
fn each_http_api_route_takes_its_own_authorization_so_v1_asks_for_api_keys_and_the_rest_keep_iam() {
    use crate::support::cfn::Stack;
    const VALID: [&str; 4] = ["NONE", "JWT", "AWS_IAM", "CUSTOM"];
    let t = template();
    let routes: Vec<String> = of_type(&t, "AWS::ApiGatewayV2::Route").map(|(name, _)| name.clone()).collect();
    for (openai, expected) in [("API_KEY", "NONE"), ("AWS_IAM", "AWS_IAM"), ("NONE", "NONE")] {
        let parameters = [("ModelName", "small-model"), ("LargeModelName", "large-model"), ("OpenAiAuthType", openai)];
        let stack = Stack::new("auth", &parameters);
        let secret = stack.environment("RouterFunction").into_iter().find(|(name, _)| name == "API_KEYS_SECRET_ID");
        let secret = secret.expect("the router is told of the key store").1;
        assert_eq!(!secret.is_empty(), openai == "API_KEY", "OpenAiAuthType {openai}: API_KEYS_SECRET_ID {secret:?}");
        for route in &routes {
            let kind = stack.property(route, "AuthorizationType").unwrap();
            let kind = kind.as_str().unwrap();
            assert!(VALID.contains(&kind), "{route}: {kind} is no AuthorizationType of an HTTP API");
            let wanted = if route == "OpenAiRoute" { expected } else { "AWS_IAM" };
            assert_eq!(kind, wanted, "OpenAiAuthType {openai}: {route}");
        }
    }
}

/// Secrets Manager API Reference, GetSecretValue, required permissions: secretsmanager:GetSecretValue, and "if the
/// secret is encrypted using a customer-managed key instead of the AWS managed key aws/secretsmanager, then you also
/// need kms:Decrypt permissions for that key"; Secrets Manager User Guide, "Secret encryption and decryption":
/// Secrets Manager calls KMS Decrypt on the caller's behalf (kms:ViaService secretsmanager.<Region>.amazonaws.com).
/// An IAM grant on a KMS key counts only where the key policy lets the account's IAM policies decide (KMS Developer
/// Guide, "Default key policy"). The router reads the API keys' secret, encrypted with LogsKey as WebhookSecret is:
/// RouterRole may GetSecretValue exactly that secret (no other, no wildcard) and kms:Decrypt LogsKey.
#[test]
fn the_router_may_read_the_api_keys_secret_and_decrypt_it_with_the_key_that_encrypts_it() {
    let t = template();
    let secret = &t["Resources"]["ApiKeysSecret"]["Properties"];
    let logs_key = json!({"Fn::GetAtt": ["LogsKey", "Arn"]});
    assert_eq!(secret["KmsKeyId"], logs_key, "encrypted with the stack's key, as WebhookSecret");
    let grants = statements(&t["Resources"]["RouterRole"]);
    let reads: Vec<&Value> =
        grants.iter().copied().filter(|s| s["Action"].to_string().contains("secretsmanager:")).collect();
    assert!(
        reads.iter().any(|s| s["Action"] == "secretsmanager:GetSecretValue"
            && s["Resource"] == json!({"Ref": "ApiKeysSecret"})
            && s["Effect"] == "Allow"),
        "RouterRole may not read ApiKeysSecret: {reads:?}"
    );
    for statement in &reads {
        let resource = statement["Resource"].to_string();
        assert!(!resource.contains('*') && !statement["Action"].to_string().contains('*'), "{statement}");
    }
    let decrypts = grants.iter().any(|s| {
        let through_secrets_manager = s.get("Condition").is_none_or(|c| {
            c["StringEquals"]["kms:ViaService"] == json!({"Fn::Sub": "secretsmanager.${AWS::Region}.amazonaws.com"})
        });
        s["Effect"] == "Allow"
            && s["Action"].to_string().contains("kms:Decrypt")
            && s["Resource"] == logs_key
            && through_secrets_manager
    });
    assert!(decrypts, "RouterRole may not kms:Decrypt LogsKey, so GetSecretValue of ApiKeysSecret would fail");
    let key_policy = t["Resources"]["LogsKey"]["Properties"]["KeyPolicy"]["Statement"].as_array().unwrap();
    let root = json!({"AWS": {"Fn::Sub": "arn:${AWS::Partition}:iam::${AWS::AccountId}:root"}});
    assert!(
        key_policy.iter().any(|s| s["Principal"] == root && s["Action"] == "kms:*"),
        "LogsKey's policy must let IAM policies grant its use"
    );
    let env = &t["Resources"]["RouterFunction"]["Properties"]["Environment"]["Variables"];
    assert_eq!(env["API_KEYS_SECRET_ID"], json!({"Fn::If": ["OpenAiUsesApiKeys", {"Ref": "ApiKeysSecret"}, ""]}));
}

/// Secrets Manager API Reference, PutSecretValue: `SecretString` has a maximum length of 65,536. `gpuinfer api-key
/// add` writes the whole key document there, so it refuses the key that would make the document longer (with what
/// to do) instead of leaving PutSecretValue to fail; every document it accepts fits.
#[test]
fn the_key_document_always_fits_in_a_secrets_manager_secret_string() {
    use gpuinfer::{KeyDocument, MAX_KEY_DOCUMENT_BYTES};
    assert_eq!(MAX_KEY_DOCUMENT_BYTES, 65_536);
    let mut document = KeyDocument::default();
    let project = "p".repeat(64);
    let mut added = 0;
    let refusal = loop {
        match document.add(&project, &format!("sk-{added}")) {
            Ok(_) => added += 1,
            Err(refusal) => break refusal,
        }
        assert!(document.to_json().len() <= MAX_KEY_DOCUMENT_BYTES, "{added} keys: over the limit");
    };
    assert!(added > 300, "only {added} keys of the longest project fit");
    assert!(refusal.contains("revoke"), "{refusal}");
    assert_eq!(document.entries().len(), added, "the refused key is not kept");
}

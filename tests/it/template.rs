//! Contract tests of template.yaml against the binary: environment names, metric names, least
//! privilege per tier, queue settings, security defaults and cost tags.

use std::collections::{BTreeMap, BTreeSet};

use crate::support::cfn::{Stack, environment_entries, of_type, resources, statements, template};
use clap::CommandFactory;
use gpuinfer::Cli;
use serde_json::{Value, json};

/// Environment names a subcommand reads, from its clap definition (global flags included).
fn env_names(subcommand: &str) -> BTreeSet<String> {
    let cli = Cli::command();
    let mut names: BTreeSet<String> =
        cli.get_arguments().filter_map(|a| a.get_env()).map(|e| e.to_string_lossy().into_owned()).collect();
    names.insert(gpuinfer::COMMAND_ENV.to_owned());
    let sub = cli.find_subcommand(subcommand).unwrap_or_else(|| panic!("no subcommand {subcommand}"));
    names.extend(sub.get_arguments().filter_map(|a| a.get_env()).map(|e| e.to_string_lossy().into_owned()));
    names
}

/// Environment names entrypoint.sh reads itself (`${NAME` references).
fn entrypoint_names() -> BTreeSet<String> {
    let text = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/entrypoint.sh")).unwrap();
    text.split("${")
        .skip(1)
        .map(|rest| rest.chars().take_while(|c| c.is_ascii_uppercase() || *c == '_' || c.is_ascii_digit()).collect())
        .filter(|name: &String| !name.is_empty())
        .collect()
}

#[test]
fn every_environment_name_the_template_passes_is_read() {
    let t = template();
    let mut checked = 0;
    for (name, function) in of_type(&t, "AWS::Lambda::Function") {
        let command = function["Properties"]["Description"].as_str().unwrap().split(' ').nth(1).unwrap().to_owned();
        let reads = env_names(&command);
        for variable in function["Properties"]["Environment"]["Variables"].as_object().unwrap().keys() {
            assert!(reads.contains(variable), "{name} passes {variable}, which `gpuinfer {command}` does not read");
            checked += 1;
        }
    }
    let container_reads: BTreeSet<String> = env_names("worker").union(&entrypoint_names()).cloned().collect();
    for (name, task) in of_type(&t, "AWS::ECS::TaskDefinition") {
        for container in task["Properties"]["ContainerDefinitions"].as_array().unwrap() {
            let secrets = container["Secrets"].as_array().into_iter().flatten();
            for variable in environment_entries(container).into_iter().chain(secrets) {
                let variable = variable["Name"].as_str().unwrap();
                assert!(
                    container_reads.contains(variable),
                    "{name} passes {variable}, read by neither the worker nor entrypoint.sh"
                );
                checked += 1;
            }
        }
    }
    assert!(checked >= 20, "only {checked} variables found: is the template parsed right?");
}

#[test]
fn each_task_role_touches_only_its_lanes_the_dead_letter_queue_and_results() {
    let t = template();
    for (role, own, high, batch) in [
        ("SmallTaskRole", "SmallQueue", "SmallHighQueue", "SmallBatchQueue"),
        ("LargeTaskRole", "LargeQueue", "LargeHighQueue", "LargeBatchQueue"),
    ] {
        for statement in statements(&t["Resources"][role]) {
            let actions: Vec<&str> = match &statement["Action"] {
                Value::String(a) => vec![a.as_str()],
                other => other.as_array().unwrap().iter().map(|a| a.as_str().unwrap()).collect(),
            };
            let resource = statement["Resource"].to_string();
            assert_ne!(statement["Resource"], "*", "{role} grants {actions:?} on every resource");
            for action in actions {
                match action {
                    "sqs:SendMessage" => assert!(
                        resource.contains("DeadLetterQueue") || resource.contains("OutputDestination"),
                        "{role} may send only to the DLQ and a queue named as OutputDestination: {resource}"
                    ),
                    a if a.starts_with("sqs:") => {
                        assert_eq!(
                            statement["Resource"],
                            json!([{"Fn::GetAtt": [own, "Arn"]}, {"Fn::GetAtt": [high, "Arn"]}, {"Fn::GetAtt": [batch, "Arn"]}]),
                            "{role} {a} must be on {own}, {high} and {batch} only"
                        )
                    }
                    "s3:PutObject" => assert!(
                        (resource.contains("/results/*") && resource.contains("ResultsBucket"))
                            || resource.contains("OutputDestination"),
                        "{role}: {resource}"
                    ),
                    "s3:GetObject" | "s3:ListBucket" => {
                        assert!(
                            resource.contains("/results/*")
                                || statement["Resource"] == json!({"Fn::GetAtt": ["ResultsBucket", "Arn"]})
                                || resource.contains("ModelS3Path")
                                || resource.contains("OutputDestination"),
                            "{role}: {resource}"
                        )
                    }
                    other => panic!("{role} has an unexpected action {other}"),
                }
            }
        }
    }
}

#[test]
fn the_router_role_only_enqueues_reads_and_cancels_results_asks_one_model_and_wakes_the_two_services() {
    let t = template();
    let statements = statements(&t["Resources"]["RouterRole"]);
    let actions = |statement: &Value| -> Vec<String> {
        match &statement["Action"] {
            Value::String(action) => vec![action.clone()],
            list => list.as_array().unwrap().iter().map(|a| a.as_str().unwrap().to_owned()).collect(),
        }
    };
    let granted: BTreeSet<(String, String)> = statements
        .iter()
        .flat_map(|s| actions(s).into_iter().map(move |action| (action, s["Resource"].to_string())))
        .collect();
    let arn = |name: &str| json!({"Fn::GetAtt": [name, "Arn"]});
    let results = json!({"Fn::Sub": "${ResultsBucket.Arn}/results/*"});
    let bucket = |suffix: &str| {
        json!({"Fn::Sub": [format!("arn:${{AWS::Partition}}:s3:::${{Bucket}}{suffix}"),
            {"Bucket": {"Fn::Select": [2, {"Fn::Split": ["/", {"Ref": "OutputDestination"}]}]}}]})
    };
    let output_bucket = json!([bucket(""), bucket("/*")]);
    // The wake on arrival: the two tiers' services.
    let service = |id: &str| {
        json!({"Fn::Sub": format!(
            "arn:${{AWS::Partition}}:ecs:${{AWS::Region}}:${{AWS::AccountId}}:service/${{Cluster}}/${{{id}.Name}}"
        )})
    };
    let services = json!([service("SmallService"), service("LargeService")]);
    let expected: BTreeSet<(String, String)> = [
        (
            "sqs:SendMessage",
            json!([
                arn("SmallQueue"),
                arn("SmallHighQueue"),
                arn("SmallBatchQueue"),
                arn("LargeQueue"),
                arn("LargeHighQueue"),
                arn("LargeBatchQueue")
            ]),
        ),
        ("s3:GetObject", results.clone()),
        ("s3:PutObject", results.clone()),
        ("s3:DeleteObject", results.clone()),
        ("s3:AbortMultipartUpload", results),
        ("s3:ListBucket", arn("ResultsBucket")),
        ("s3:GetObject", output_bucket.clone()),
        ("s3:PutObject", output_bucket.clone()),
        ("s3:DeleteObject", output_bucket.clone()),
        ("s3:AbortMultipartUpload", output_bucket.clone()),
        ("s3:ListBucket", output_bucket),
        ("bedrock:InvokeModel", classify_resources()),
        ("kms:Decrypt", arn("LogsKey")),
        ("ecs:DescribeServices", services.clone()),
        ("ecs:UpdateService", services),
        // The key the OpenAI-shaped webhook events are signed with (OPENAI_WEBHOOK_SECRET_ID).
        ("secretsmanager:GetSecretValue", json!({"Ref": "OpenAiWebhookSecret"})),
        ("secretsmanager:GetSecretValue", json!({"Ref": "ApiKeysSecret"})),
    ]
    .into_iter()
    .map(|(action, resource)| (action.to_owned(), resource.to_string()))
    .collect();
    assert_eq!(granted, expected);
}

/// The RouterRole's Classify resources as the template writes them: an inference profile and its model in the Regions
/// it routes to, or a model in the stack's Region (aws_rules.rs checks what they resolve to).
fn classify_resources() -> Value {
    let part = |i: u64| json!({"Fn::Select": [i, {"Fn::Split": [".", {"Fn::Sub": "${BedrockModelId}.."}]}]});
    let profile = json!({"Fn::If": ["BedrockModelIsDefault", "*.amazon.nova-micro-v1:0", {"Ref": "BedrockModelId"}]});
    let model =
        json!({"Fn::If": ["BedrockModelIsDefault", "amazon.nova-micro-v1:0", {"Fn::Join": [".", [part(1), part(2)]]}]});
    json!({"Fn::If": [
        "BedrockModelIsProfile",
        [
            {"Fn::Sub": [
                "arn:${AWS::Partition}:bedrock:${AWS::Region}:${AWS::AccountId}:inference-profile/${Profile}",
                {"Profile": profile}
            ]},
            {"Fn::Sub": ["arn:${AWS::Partition}:bedrock:*::foundation-model/${Model}", {"Model": model}]}
        ],
        {"Fn::Sub": "arn:${AWS::Partition}:bedrock:${AWS::Region}::foundation-model/${BedrockModelId}"}
    ]})
}

/// BedrockModelId's default is empty, passed to the router as it is: the router then calls Nova Micro through the
/// inference profile of its own Region (tests/it/bedrock.rs), so no Region needs an entry in a mapping (a
/// Fn::FindInMap that finds none fails the deployment, even inside a Fn::If branch not taken); an explicit id is
/// passed as it is.
#[test]
fn the_default_classifier_is_left_to_the_router_to_pick_for_its_region() {
    let t = template();
    assert_eq!(t["Parameters"]["BedrockModelId"]["Default"], "", "empty: the profile of the router's Region");
    assert!(!t.to_string().contains("NovaMicro"), "no per-Region mapping of the classifier");
    let model_id = |overrides: &[(&str, &str)]| {
        let mut parameters = vec![("ModelName", "small-model"), ("LargeModelName", "large-model")];
        parameters.extend_from_slice(overrides);
        let stack = Stack::new("classify", &parameters);
        let environment: BTreeMap<String, String> = stack.environment("RouterFunction").into_iter().collect();
        environment["BEDROCK_MODEL_ID"].clone()
    };
    assert_eq!(model_id(&[]), "", "the default: the router's pick");
    for explicit in ["amazon.nova-micro-v1:0", "eu.amazon.nova-lite-v1:0"] {
        assert_eq!(model_id(&[("BedrockModelId", explicit)]), explicit);
    }
}

#[test]
fn no_role_is_allowed_every_action_of_a_service() {
    let t = template();
    let mut wildcards = Vec::new();
    for (name, role) in of_type(&t, "AWS::IAM::Role") {
        {
            for statement in statements(role) {
                let actions = match &statement["Action"] {
                    Value::Array(actions) => actions.iter().collect(),
                    action => vec![action],
                };
                for action in actions.into_iter().filter_map(Value::as_str) {
                    if statement["Effect"] == "Allow" && (action == "*" || action.ends_with(":*")) {
                        wildcards.push(format!("{name}: {action}"));
                    }
                }
            }
        }
    }
    assert!(wildcards.is_empty(), "roles allowed every action of a service: {wildcards:?}");
}

#[test]
fn queues_match_the_sample_and_redrive_to_the_dead_letter_queue() {
    let t = template();
    assert_eq!(t["Mappings"]["Tiers"]["Small"]["VisibilityTimeout"], 300);
    assert_eq!(t["Mappings"]["Tiers"]["Large"]["VisibilityTimeout"], 600);
    for (queue, tier) in
        [("SmallQueue", "Small"), ("SmallHighQueue", "Small"), ("LargeQueue", "Large"), ("LargeHighQueue", "Large")]
    {
        let p = &t["Resources"][queue]["Properties"];
        assert_eq!(p["VisibilityTimeout"], json!({"Fn::FindInMap": ["Tiers", tier, "VisibilityTimeout"]}), "{queue}");
        assert_eq!(p["MessageRetentionPeriod"], 345_600, "{queue}");
        assert_eq!(p["MaximumMessageSize"], 1_048_576, "{queue}");
        assert_eq!(p["RedrivePolicy"]["deadLetterTargetArn"], json!({"Fn::GetAtt": ["DeadLetterQueue", "Arn"]}));
        assert_eq!(p["RedrivePolicy"]["maxReceiveCount"], 3);
        assert!(p["KmsMasterKeyId"].is_string() || p["SqsManagedSseEnabled"] == true, "{queue} is encrypted");
    }
    assert_eq!(t["Resources"]["DeadLetterQueue"]["Properties"]["MessageRetentionPeriod"], 1_209_600);
    for (name, task) in of_type(&t, "AWS::ECS::TaskDefinition") {
        let env = &task["Properties"]["ContainerDefinitions"][0]["Environment"];
        let max = env.as_array().unwrap().iter().find(|v| v["Name"] == "MAX_RECEIVE_COUNT").unwrap();
        assert_eq!(max["Value"], "3", "{name}: the worker's last attempt must match the redrive policy");
    }
}

#[test]
fn security_defaults_hold() {
    let t = template();
    assert_eq!(t["Parameters"]["ApiAuthType"]["Default"], "AWS_IAM", "API auth is on by default");
    assert_eq!(t["Parameters"]["OpenAiAuthType"]["Default"], "API_KEY", "the /v1 API asks for a key by default");
    for (name, route) in of_type(&t, "AWS::ApiGatewayV2::Route") {
        let guard = if name == "OpenAiRoute" {
            // Open at API Gateway only where the router checks every request's key (aws_rules.rs).
            json!({"Fn::If": ["OpenAiUsesApiKeys", "NONE", {"Ref": "OpenAiAuthType"}]})
        } else {
            json!({"Ref": "ApiAuthType"})
        };
        assert_eq!(route["Properties"]["AuthorizationType"], guard, "{name}");
    }
    assert!(t["Resources"]["ApiStage"]["Properties"]["AccessLogSettings"]["DestinationArn"].is_object());
    for (name, bucket) in of_type(&t, "AWS::S3::Bucket") {
        let block = &bucket["Properties"]["PublicAccessBlockConfiguration"];
        for setting in ["BlockPublicAcls", "BlockPublicPolicy", "IgnorePublicAcls", "RestrictPublicBuckets"] {
            assert_eq!(block[setting], true, "{name}.{setting}");
        }
        assert!(bucket["Properties"]["BucketEncryption"].is_object(), "{name} is encrypted");
        let policy =
            of_type(&t, "AWS::S3::BucketPolicy").find(|(_, p)| p["Properties"]["Bucket"] == json!({"Ref": name}));
        let statements = policy.unwrap_or_else(|| panic!("{name} has no bucket policy")).1["Properties"]["PolicyDocument"]["Statement"].to_string();
        assert!(
            statements.contains("aws:SecureTransport") && statements.contains("Deny"),
            "{name} must refuse plain HTTP"
        );
    }
    let results = &t["Resources"]["ResultsBucket"]["Properties"];
    assert_eq!(
        results["LifecycleConfiguration"]["Rules"][0]["ExpirationInDays"],
        json!({"Ref": "ResultRetentionDays"})
    );
    // No long-lived process runs as root: the image starts as root for entrypoint.sh alone (to open the large tier's
    // /dev/shm, tests/it/aws_rules.rs), which re-executes itself as uid 1000 with no way back (tests/it/entrypoint.rs
    // runs it as root). No container is privileged.
    for (name, task) in of_type(&t, "AWS::ECS::TaskDefinition") {
        let container = &task["Properties"]["ContainerDefinitions"][0];
        assert!(container["Privileged"] != true, "{name} is privileged");
    }
    let read = |name: &str| std::fs::read_to_string(format!("{}/{name}", env!("CARGO_MANIFEST_DIR"))).unwrap();
    let last_user = read("Dockerfile").lines().rfind(|l| l.starts_with("USER ")).unwrap().to_owned();
    assert_eq!(last_user, "USER 0", "the runtime image starts as root for entrypoint.sh, which drops to uid 1000");
    assert!(
        read("entrypoint.sh").contains(
            r#"exec setpriv --reuid="$APP_UID" --regid="$app_gid" --clear-groups --no-new-privs -- "${BASH_SOURCE[0]}""#
        ),
        "entrypoint.sh re-executes itself as uid 1000, its own group only, with no new privileges"
    );
    for (name, provider) in of_type(&t, "AWS::ECS::CapacityProvider") {
        let repair = &provider["Properties"]["ManagedInstancesProvider"]["AutoRepairConfiguration"]["ActionsStatus"];
        assert_eq!(repair, "ENABLED", "{name} has GPU auto-repair");
    }
}

#[test]
fn sample_parameters_keep_their_names_and_defaults() {
    let t = template();
    let p = &t["Parameters"];
    for (name, default) in [
        ("QuantizationMethod", json!("awq")),
        ("MaxSequenceLength", json!(2048)),
        ("MinTaskCount", json!(0)),
        ("MaxTaskCount", json!(10)),
        ("LargeModelQuantization", json!("awq")),
        ("LargeModelMaxSequenceLength", json!(4096)),
        ("LargeModelMinTaskCount", json!(0)),
        ("LargeModelMaxTaskCount", json!(4)),
        ("LargeModelGPUCount", json!(8)),
        ("PromptComplexityThreshold", json!(2000)),
        ("MaxTokensComplexityThreshold", json!(1024)),
        ("QueueDepthScaleThreshold", json!(5)),
        ("ScaleDownCooldownSeconds", json!(300)),
        ("LogRetentionDays", json!(30)),
        ("OutputDestination", json!("")),
        ("CostAllocationTagProject", json!("gpu-inference-pipeline")),
    ] {
        assert_eq!(p[name]["Default"], default, "{name}");
    }
    for required in ["ModelName", "LargeModelName", "ModelS3Path", "LargeModelS3Path"] {
        assert!(p[required].is_object(), "{required} is a parameter");
    }
}

#[test]
fn stateful_resources_say_what_happens_on_delete_and_every_taggable_one_carries_the_project_tag() {
    let t = template();
    let stateful =
        ["AWS::SQS::Queue", "AWS::S3::Bucket", "AWS::Logs::LogGroup", "AWS::ECR::Repository", "AWS::KMS::Key"];
    let untaggable = [
        "AWS::EC2::VPCGatewayAttachment",
        "AWS::EC2::Route",
        "AWS::EC2::SubnetRouteTableAssociation",
        "AWS::EC2::VPCEndpoint",
        "AWS::IAM::InstanceProfile",
        "AWS::ECS::ClusterCapacityProviderAssociations",
        "AWS::S3::BucketPolicy",
        "AWS::SNS::TopicPolicy",
        "AWS::SNS::Subscription",
        "AWS::Logs::ResourcePolicy",
        "AWS::Lambda::Permission",
        "AWS::Lambda::EventInvokeConfig",
        "AWS::ApiGatewayV2::Integration",
        "AWS::ApiGatewayV2::Route",
        "AWS::CloudWatch::Alarm",
        "AWS::CloudWatch::Dashboard",
        "AWS::Events::Rule",
        "AWS::ApplicationAutoScaling::ScalableTarget",
        "AWS::ApplicationAutoScaling::ScalingPolicy",
        "AWS::ECR::PullThroughCacheRule",
    ];
    for (name, resource) in resources(&t) {
        let kind = resource["Type"].as_str().unwrap();
        if stateful.contains(&kind) {
            assert!(resource["DeletionPolicy"].is_string() && resource["UpdateReplacePolicy"].is_string(), "{name}");
        }
        if untaggable.contains(&kind) {
            continue;
        }
        let tags = &resource["Properties"]["Tags"];
        let tagged = match tags {
            Value::Array(list) => {
                list.iter().any(|t| t["Key"] == "Project" && t["Value"] == json!({"Ref": "CostAllocationTagProject"}))
            }
            Value::Object(map) => map.get("Project") == Some(&json!({"Ref": "CostAllocationTagProject"})),
            _ => false,
        };
        assert!(tagged, "{name} ({kind}) lacks the Project cost tag");
    }
}

#[test]
fn arns_are_partition_aware() {
    let text = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/template.yaml")).unwrap();
    assert!(!text.contains("arn:aws:"), "write arn:${{AWS::Partition}}:… so the stack deploys in every partition");
}

/// Metric names a template resource uses in the gpuinfer namespace (alarm MetricName, dashboard widget rows).
fn custom_metrics_used(t: &Value) -> BTreeSet<String> {
    let mut used = BTreeSet::new();
    for (_, alarm) in of_type(t, "AWS::CloudWatch::Alarm") {
        if alarm["Properties"]["Namespace"] == gpuinfer::metrics::NAMESPACE {
            used.insert(alarm["Properties"]["MetricName"].as_str().unwrap().to_owned());
        }
    }
    let body = t["Resources"]["Dashboard"]["Properties"]["DashboardBody"]["Fn::Sub"][0].as_str().unwrap();
    let needle = format!("[\"{}\", \"", gpuinfer::metrics::NAMESPACE);
    for rest in body.split(&needle).skip(1) {
        used.insert(rest.split('"').next().unwrap().to_owned());
    }
    used
}

#[test]
fn alarms_and_dashboard_use_only_metrics_the_binary_emits() {
    let t = template();
    let used = custom_metrics_used(&t);
    for name in &used {
        assert!(
            gpuinfer::metrics::ALL.contains(&name.as_str()),
            "the template uses {name}, which gpuinfer never emits"
        );
    }
    for expected in ["InferenceScalingMetric", "HasBacklogWithoutCapacity", "RoutedRequests", "InferenceLatency"] {
        assert!(used.contains(expected), "{expected} is neither alarmed on nor shown");
    }
    let body = t["Resources"]["Dashboard"]["Properties"]["DashboardBody"]["Fn::Sub"][0].as_str().unwrap();
    for section in ["## Routing", "## Small tier", "## Large tier", "## GPU hardware"] {
        assert!(body.contains(section), "dashboard section {section}");
    }
}

/// The dashboard's cold-start widgets, parsed from its body: per tier, the metric names they read, in order.
fn cold_start_widgets(t: &Value) -> BTreeMap<String, Vec<String>> {
    let body = t["Resources"]["Dashboard"]["Properties"]["DashboardBody"]["Fn::Sub"][0].as_str().unwrap();
    let body: Value = serde_json::from_str(body).expect("the dashboard body is JSON");
    let mut read: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let widgets = body["widgets"].as_array().unwrap().iter().map(|widget| &widget["properties"]);
    let cold_start =
        |widget: &&Value| widget["title"].as_str().is_some_and(|t| t.to_lowercase().contains("cold start"));
    for widget in widgets.filter(cold_start) {
        for row in widget["metrics"].as_array().unwrap() {
            let row: Vec<&str> = row.as_array().unwrap().iter().filter_map(Value::as_str).collect();
            assert_eq!((row[0], row[2]), (gpuinfer::metrics::NAMESPACE, "Tier"), "{row:?}");
            read.entry(row[3].to_owned()).or_default().push(row[1].to_owned());
        }
    }
    read
}

#[test]
fn the_dashboard_shows_each_tiers_cold_start_under_the_names_the_worker_emits() {
    let read = cold_start_widgets(&template());
    let emitted: Vec<String> = gpuinfer::metrics::COLD_START.iter().map(|name| (*name).to_owned()).collect();
    assert_eq!(read.keys().collect::<Vec<_>>(), ["large", "small"], "a cold-start widget per tier");
    for (tier, names) in &read {
        assert_eq!(
            names, &emitted,
            "the {tier} tier's widgets read every cold-start metric the worker emits, in order"
        );
    }
}

#[test]
fn scaling_alarms_follow_the_scaler_design() {
    let t = template();
    for (tier, idle_periods) in [("Small", 5), ("Large", 10)] {
        let out = &t["Resources"][format!("{tier}ScaleOutAlarm")]["Properties"];
        assert_eq!(
            (out["Threshold"].as_f64(), out["ComparisonOperator"].as_str()),
            (Some(1.0), Some("GreaterThanThreshold"))
        );
        assert_eq!(out["EvaluationPeriods"], 1, "{tier}: one request on zero tasks scales out within a minute");
        let idle = &t["Resources"][format!("{tier}ScaleInAlarm")]["Properties"];
        assert_eq!(idle["ComparisonOperator"], "LessThanThreshold");
        let idle_minutes = if tier == "Small" { "ScaleInIdleMinutes" } else { "LargeModelScaleInIdleMinutes" };
        assert_eq!(idle["EvaluationPeriods"], json!({ "Ref": idle_minutes }));
        assert_eq!(t["Parameters"][idle_minutes]["Default"], idle_periods, "{tier}: the AWS sample's idle window");
        let steps = |policy: &str| {
            t["Resources"][format!("{tier}{policy}")]["Properties"]["StepScalingPolicyConfiguration"]["StepAdjustments"]
                .as_array()
                .unwrap()
                .iter()
                .map(|s| s["ScalingAdjustment"].as_i64().unwrap())
                .collect::<Vec<_>>()
        };
        assert_eq!(steps("ScaleOutPolicy"), (1..=10).collect::<Vec<_>>(), "{tier}: proportional scale-out");
        assert_eq!(steps("ScaleInPolicy"), (1..=10).map(|k| -k).collect::<Vec<_>>());
    }
    let scaler = &t["Resources"]["ScalerFunction"]["Properties"];
    assert_eq!(scaler["Environment"]["Variables"]["GPUINFER_COMMAND"], "scaler");
    let schedule = &t["Resources"]["ScalerSchedule"]["Properties"]["ScheduleExpression"];
    assert_eq!(schedule, "rate(1 minute)");
}

/// Step scaling: "The adjustments can continue for additional alarm breaches until the alarm state returns to OK"
/// (Application Auto Scaling User Guide, "How step scaling for Application Auto Scaling works"); the cooldown is all
/// that spaces them. After a scale-in to zero the scale-in alarm stays in ALARM until the scaler's next datapoint
/// (every 60 s) is evaluated (one 60 s period more); a wake on arrival in that time sets the tier to 1 task, and a
/// cooldown shorter than those two periods lets the repeated scale-in take it back to 0 before the alarm returns to OK.
#[test]
fn a_scale_in_cooldown_outlasts_the_alarm_that_could_undo_a_wake() {
    let t = template();
    let period = t["Resources"]["SmallScaleInAlarm"]["Properties"]["Period"].as_u64().unwrap();
    assert_eq!(t["Resources"]["LargeScaleInAlarm"]["Properties"]["Period"].as_u64(), Some(period));
    for (policy, parameter) in [
        ("SmallScaleInPolicy", "ScaleDownCooldownSeconds"),
        ("LargeScaleInPolicy", "LargeModelScaleDownCooldownSeconds"),
    ] {
        let cooldown = &t["Resources"][policy]["Properties"]["StepScalingPolicyConfiguration"]["Cooldown"];
        assert_eq!(cooldown, &json!({ "Ref": parameter }));
        let least = t["Parameters"][parameter]["MinValue"].as_u64().unwrap_or(0);
        assert!(least >= 2 * period, "{parameter}: MinValue {least} lets a repeated scale-in undo a wake");
        let default = t["Parameters"][parameter]["Default"].as_u64().unwrap();
        assert!(default >= least, "{parameter}: its default {default} is allowed");
    }
}

/// A container's `Environment` (and `Secrets`) entry for `name`.
fn container_variable<'a>(task: &'a Value, name: &str) -> &'a Value {
    let container = &task["Properties"]["ContainerDefinitions"][0];
    let entries = environment_entries(container).into_iter().chain(container["Secrets"].as_array().unwrap());
    entries.into_iter().find(|v| v["Name"] == name).unwrap_or_else(|| panic!("no {name}"))
}

#[test]
fn priority_lanes_cancel_and_callbacks_are_wired_end_to_end() {
    let t = template();
    let router = t["Resources"]["RouterRole"]["Properties"]["Policies"][0]["PolicyDocument"]["Statement"].clone();
    let enqueue = router.as_array().unwrap().iter().find(|s| s["Sid"] == "Enqueue").unwrap();
    let lanes = ["SmallQueue", "SmallHighQueue", "SmallBatchQueue", "LargeQueue", "LargeHighQueue", "LargeBatchQueue"];
    assert_eq!(
        enqueue["Resource"],
        json!(lanes.map(|q| json!({"Fn::GetAtt": [q, "Arn"]}))),
        "the router sends to every lane"
    );
    let results = router.as_array().unwrap().iter().find(|s| s["Sid"] == "ReadAndCancelResults").unwrap();
    assert_eq!(
        results["Action"],
        json!(["s3:GetObject", "s3:PutObject", "s3:DeleteObject", "s3:AbortMultipartUpload"]),
        "a cancel is a document the router writes, beside its record of each accepted request, and Batch API files"
    );
    assert!(results["Resource"].to_string().contains("/results/*"));
    for function in ["RouterFunction", "ScalerFunction"] {
        let variables = &t["Resources"][function]["Properties"]["Environment"]["Variables"];
        for (name, queue) in [("SMALL_HIGH_QUEUE_URL", "SmallHighQueue"), ("LARGE_HIGH_QUEUE_URL", "LargeHighQueue")] {
            assert_eq!(variables[name], json!({"Ref": queue}), "{function} {name}");
        }
    }
    let scaler = t["Resources"]["ScalerRole"]["Properties"]["Policies"][0]["PolicyDocument"]["Statement"].clone();
    let depth = scaler.as_array().unwrap().iter().find(|s| s["Sid"] == "QueueDepth").unwrap();
    assert_eq!(depth["Resource"], enqueue["Resource"], "the scaler counts every lane the router fills");
    for (task, high) in [("SmallTaskDefinition", "SmallHighQueue"), ("LargeTaskDefinition", "LargeHighQueue")] {
        let task = &t["Resources"][task];
        assert_eq!(container_variable(task, "HIGH_QUEUE_URL")["Value"], json!({"Ref": high}));
        assert_eq!(container_variable(task, "WEBHOOK_SECRET")["ValueFrom"], json!({"Ref": "WebhookSecret"}));
        let names: Vec<&Value> = task["Properties"]["ContainerDefinitions"][0]["Environment"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| &v["Name"])
            .collect();
        for local_only in ["ALLOW_HTTP_CALLBACKS", "ALLOW_PRIVATE_CALLBACKS"] {
            assert!(!names.contains(&&json!(local_only)), "{local_only} is for local development only");
        }
    }
    let execution =
        t["Resources"]["TaskExecutionRole"]["Properties"]["Policies"][0]["PolicyDocument"]["Statement"].to_string();
    assert!(execution.contains("secretsmanager:GetSecretValue") && execution.contains("WebhookSecret"), "{execution}");
    let secret = &t["Resources"]["WebhookSecret"]["Properties"];
    assert_eq!(secret["GenerateSecretString"]["ExcludePunctuation"], true, "letters and digits: valid base64");
    assert_eq!(secret["GenerateSecretString"]["PasswordLength"].as_u64().unwrap() % 4, 0, "no padding needed");
    let routes: Vec<&str> =
        of_type(&t, "AWS::ApiGatewayV2::Route").map(|(_, r)| r["Properties"]["RouteKey"].as_str().unwrap()).collect();
    for route in ["POST /infer", "POST /infer/batch", "GET /results/{requestId}", "DELETE /results/{requestId}"] {
        assert!(routes.contains(&route), "{route} is routed");
    }
}

/// CloudWatch tells metrics apart by their full set of dimensions: each worker publishes `EngineSaturation` under
/// its cluster's and service's names, which must be the very names the scaler asks for (Container Insights'
/// dimensions, ClusterName and ServiceName).
#[test]
fn workers_publish_their_saturation_under_the_names_the_scaler_reads_it_by() {
    let stack = Stack::new("dims", &[("ModelName", "small-model"), ("LargeModelName", "large-model")]);
    let scaler: BTreeMap<String, String> = stack.environment("ScalerFunction").into_iter().collect();
    for (task, service, tier) in
        [("SmallTaskDefinition", "SmallService", "small"), ("LargeTaskDefinition", "LargeService", "large")]
    {
        let worker: BTreeMap<String, String> = stack.environment(task).into_iter().collect();
        assert_eq!(worker["TIER"], tier);
        assert_eq!(worker["CLUSTER_NAME"], stack.physical_name("Cluster"), "{task}");
        assert_eq!(worker["CLUSTER_NAME"], scaler["CLUSTER_NAME"], "{task}");
        assert_eq!(worker["SERVICE_NAME"].replace("{tier}", tier), stack.physical_name(service), "{task}");
        assert_eq!(worker["SERVICE_NAME"], scaler["SERVICE_NAME"], "{task}");
    }
}

/// ECS: an environment variable of a container definition is a KeyValuePair whose `Value` has type String
/// (AWS::ECS::TaskDefinition KeyValuePair, CloudFormation reference), so a number is passed quoted. The ceiling the
/// template passes is the binary's own default: one value, whether or not the variable is set.
#[test]
fn the_template_passes_the_workers_default_concurrency_as_the_string_ecs_takes() {
    let t = template();
    let cli = Cli::command();
    let worker = cli.find_subcommand("worker").unwrap();
    let argument = worker.get_arguments().find(|a| a.get_env().is_some_and(|e| e == "WORKER_CONCURRENCY")).unwrap();
    let default = argument.get_default_values()[0].to_string_lossy().into_owned();
    for name in ["SmallTaskDefinition", "LargeTaskDefinition"] {
        let task = &t["Resources"][name];
        assert_eq!(container_variable(task, "WORKER_CONCURRENCY")["Value"], json!(default), "{name}");
        for variable in environment_entries(&task["Properties"]["ContainerDefinitions"][0]) {
            let value = &variable["Value"];
            assert!(value.is_string() || value.is_object(), "{} is not a string: {value}", variable["Name"]);
        }
    }
}

/// S3 User Guide, "How Amazon S3 handles conflicts in lifecycle configurations": of two expiration rules that overlap,
/// "the shorter expiration policy is honored"; S3 API Reference, LifecycleExpiration: `Days` "must be a non-zero
/// positive integer", so a day is the least a rule keeps. Every prefix the router and the workers write under the
/// results prefix has an enabled rule (`expire-results`, and `expire-uploads` for the Uploads API), the shortest of
/// those that apply keeps it as long as `router::openai::expiry::PREFIXES` says, and each removes the noncurrent
/// versions the versioned bucket keeps of what it expires.
#[test]
fn every_prefix_written_to_the_results_bucket_expires_by_a_lifecycle_rule() {
    use gpuinfer::{KEPT_PREFIXES, Kept};
    let t = template();
    let mut destinations: Vec<Value> = of_type(&t, "AWS::Lambda::Function")
        .map(|(_, f)| f["Properties"]["Environment"]["Variables"].clone())
        .collect();
    destinations.retain(|variables| variables.get("OUTPUT_DESTINATION").is_some());
    let mut written: BTreeSet<String> =
        destinations.iter().map(|variables| variables["OUTPUT_DESTINATION"].to_string()).collect();
    for name in ["SmallTaskDefinition", "LargeTaskDefinition"] {
        written.insert(container_variable(&t["Resources"][name], "OUTPUT_DESTINATION")["Value"].to_string());
    }
    assert_eq!(written.len(), 1, "the router and the workers write to one destination: {written:?}");
    let destination: Value = serde_json::from_str(written.first().unwrap()).unwrap();
    let url = destination["Fn::If"][1]["Fn::Sub"].as_str().unwrap();
    let results = url.strip_prefix("s3://${ResultsBucket}/").unwrap_or_else(|| panic!("{url}"));

    let rules = t["Resources"]["ResultsBucket"]["Properties"]["LifecycleConfiguration"]["Rules"].as_array().unwrap();
    let applying = |key: &str| -> Vec<&Value> {
        let rules = rules.iter().filter(|r| r["Status"] == "Enabled");
        rules.filter(|r| r["Prefix"].as_str().is_some_and(|prefix| key.starts_with(prefix))).collect()
    };
    let with_results = json!({"Ref": "ResultRetentionDays"});
    let mut checked = vec![(format!("{results}550e8400-e29b-41d4-a716-446655440000.json"), Kept::WithResults)];
    checked.extend(KEPT_PREFIXES.iter().map(|(prefix, kept)| (format!("{results}{prefix}x"), *kept)));
    for (key, kept) in checked {
        let rules = applying(&key);
        assert!(!rules.is_empty(), "no lifecycle rule expires {key}");
        for rule in &rules {
            assert!(rule["NoncurrentVersionExpiration"]["NoncurrentDays"].is_u64(), "{rule} keeps old versions");
        }
        let days: Vec<&Value> = rules.iter().map(|rule| &rule["ExpirationInDays"]).collect();
        match kept {
            Kept::WithResults => assert!(days.iter().all(|d| **d == with_results), "{key} goes sooner: {days:?}"),
            Kept::OneDay => assert!(days.contains(&&json!(1)), "{key} is not expired after a day: {days:?}"),
        }
    }
}

/// CloudWatch PutMetricAlarm: `Period` × `EvaluationPeriods` can't be more than 604,800 s, and for a period under an
/// hour no more than one day (86,400 s); `DatapointsToAlarm` (the M of "M out of N") is at most `EvaluationPeriods`.
/// Every alarm holds both for any value its parameters allow: the scale-in alarms' idle windows
/// (`ScaleInIdleMinutes`, `LargeModelScaleInIdleMinutes`) go from 1 minute to a day, the AWS sample's 5 and 10 by
/// default, and feed both numbers, so a scale-in needs every period of the window below the threshold.
#[test]
fn every_alarm_evaluates_at_most_a_day_and_needs_no_more_datapoints_than_it_evaluates() {
    let t = template();
    let p = &t["Parameters"];
    // The largest (or smallest) value a literal or a `Ref` to a Number parameter can take.
    let bound = |value: &Value, limit: &str| match value.get("Ref") {
        Some(name) => p[name.as_str().unwrap()][limit].as_u64().unwrap_or_else(|| panic!("{name} has no {limit}")),
        None => value.as_u64().unwrap_or_else(|| panic!("{value} is not a number of periods")),
    };
    let mut checked = 0;
    for (name, alarm) in of_type(&t, "AWS::CloudWatch::Alarm") {
        let alarm = &alarm["Properties"];
        let period = alarm["Period"].as_u64().unwrap_or_else(|| panic!("{name}: Period"));
        let evaluation = &alarm["EvaluationPeriods"];
        let longest = if period < 3_600 { 86_400 } else { 604_800 };
        assert!(period * bound(evaluation, "MaxValue") <= longest, "{name}: {period} s × {evaluation}");
        assert!(bound(evaluation, "MinValue") >= 1, "{name}: at least one period");
        if let Some(datapoints) = alarm.get("DatapointsToAlarm") {
            let same = datapoints == evaluation;
            assert!(same || bound(datapoints, "MaxValue") <= bound(evaluation, "MinValue"), "{name}: {datapoints}");
        }
        checked += 1;
    }
    assert!(checked >= 8, "only {checked} alarms: is the template parsed right?");
    for (alarm, minutes, default) in
        [("SmallScaleInAlarm", "ScaleInIdleMinutes", 5), ("LargeScaleInAlarm", "LargeModelScaleInIdleMinutes", 10)]
    {
        let properties = &t["Resources"][alarm]["Properties"];
        for count in ["EvaluationPeriods", "DatapointsToAlarm"] {
            assert_eq!(properties[count], json!({ "Ref": minutes }), "{alarm} {count}");
        }
        assert_eq!((properties["Period"].as_u64(), &p[minutes]["Default"]), (Some(60), &json!(default)));
        assert_eq!((p[minutes]["MinValue"].as_u64(), p[minutes]["MaxValue"].as_u64()), (Some(1), Some(1_440)));
    }
}

/// Application Auto Scaling's cron format (Schedule recurring scaling actions using cron expressions; the EventBridge
/// cron reference it points to): `cron(` six fields `)`, minutes hours day-of-month month day-of-week year, and exactly
/// one of day-of-month and day-of-week is `?`.
fn is_application_auto_scaling_cron(schedule: &str) -> bool {
    let Some(fields) = schedule.strip_prefix("cron(").and_then(|rest| rest.strip_suffix(')')) else { return false };
    let fields: Vec<&str> = fields.split(' ').collect();
    fields.len() == 6 && fields.iter().all(|f| !f.is_empty()) && ((fields[2] == "?") != (fields[4] == "?"))
}

/// The warm window's parameters' AllowedPattern: empty, or a cron expression by the rule above.
const WARM_WINDOW_PATTERN: &str = r"^$|^cron\([^ ]+ [^ ]+ (\? [^ ]+ [^ ?]+|[^ ?]+ [^ ]+ \?) [^ ]+\)$";

/// AWS::ApplicationAutoScaling::ScalableTarget ScheduledAction (CloudFormation reference) and PutScheduledAction:
/// `ScheduledActionName` must be unique among the scheduled actions of its scalable target; `Schedule` is `at(...)`,
/// `rate(...)` or `cron(...)`, the cron of six fields; `Timezone` an IANA name (UTC when absent); a
/// `ScalableTargetAction`'s MinCapacity may not exceed the target's MaxCapacity (0 until ImagePushed), and
/// Application Auto Scaling does not restore the previous minimum when a window ends, so a second action does. Each
/// tier's warm window is off by default, a pair of actions when set: MinCapacity 1 at its start, MinTaskCount at its
/// end, only while the images are pushed and the tier would otherwise go to zero. CloudFormation User Guide,
/// "CloudFormation template Rules syntax": a rule's assertions validate parameter values before CloudFormation creates
/// or updates any resource, so the template's rules refuse half a window.
#[test]
fn warm_windows_are_scheduled_actions_as_application_auto_scaling_takes_them() {
    let t = template();
    let p = &t["Parameters"];
    for (tier, prefix, min_tasks) in [("Small", "", "MinTaskCount"), ("Large", "LargeModel", "LargeModelMinTaskCount")]
    {
        let (start, end) = (format!("{prefix}WarmWindowStart"), format!("{prefix}WarmWindowEnd"));
        let condition = format!("{tier}WarmWindow");
        let scheduled = &t["Resources"][format!("{tier}ScalableTarget")]["Properties"]["ScheduledActions"]["Fn::If"];
        assert_eq!((&scheduled[0], &scheduled[2]), (&json!(condition), &json!({"Ref": "AWS::NoValue"})), "{tier}");
        assert_eq!(
            t["Conditions"][&condition]["Fn::And"],
            json!([
                {"Condition": "ImageIsPushed"},
                {"Fn::Not": [{"Fn::Equals": [{"Ref": start}, ""]}]},
                {"Fn::Not": [{"Fn::Equals": [{"Ref": end}, ""]}]},
                {"Fn::Equals": [{"Ref": min_tasks}, 0]},
                {"Fn::Not": [{"Condition": format!("{tier}TierOff")}]}
            ]),
            "{tier}: a window only while MaxCapacity allows a task, MinTaskCount leaves the tier at zero, and it is on"
        );
        let actions = scheduled[1].as_array().unwrap();
        let names: BTreeSet<&str> = actions.iter().map(|a| a["ScheduledActionName"].as_str().unwrap()).collect();
        assert_eq!(names.len(), actions.len(), "{tier}: names are unique on the target");
        let action = |schedule: &str| actions.iter().find(|a| a["Schedule"] == json!({ "Ref": schedule })).unwrap();
        assert_eq!(action(&start)["ScalableTargetAction"], json!({"MinCapacity": 1}));
        assert_eq!(action(&end)["ScalableTargetAction"], json!({"MinCapacity": {"Ref": min_tasks}}));
        // A tier switched off (most tasks 0) has no window: MinCapacity 1 would pass its MaxCapacity.
        let max_tasks = if tier == "Small" { "MaxTaskCount" } else { "LargeModelMaxTaskCount" };
        assert_eq!(t["Conditions"][format!("{tier}TierOff")], json!({"Fn::Equals": [{"Ref": max_tasks}, "0"]}));
        for action in actions {
            assert_eq!(action["Timezone"], json!({"Ref": "WarmWindowTimezone"}));
        }
        for parameter in [&start, &end] {
            assert_eq!(
                (&p[parameter]["Default"], &p[parameter]["AllowedPattern"]),
                (&json!(""), &json!(WARM_WINDOW_PATTERN))
            );
        }
    }
    assert_eq!(p["WarmWindowTimezone"]["Default"], "Etc/UTC");

    // Half a window (a start without an end sends a ScheduledAction without its required Schedule; an end without a
    // start would be dropped unseen) fails the template's rule, which CloudFormation checks before any change.
    let cron = "cron(0 8 ? * MON-FRI *)";
    for (rule, prefix) in [("SmallWarmWindowWhole", ""), ("LargeWarmWindowWhole", "LargeModel")] {
        let (start, end) = (format!("{prefix}WarmWindowStart"), format!("{prefix}WarmWindowEnd"));
        for (given, whole) in [(vec![], true), (vec![&start, &end], true), (vec![&start], false), (vec![&end], false)] {
            let overrides: Vec<(&str, &str)> = given.iter().map(|name| (name.as_str(), cron)).collect();
            assert_eq!(Stack::new("s", &overrides).rule_holds(rule), whole, "{rule} with {given:?}");
        }
    }

    // A tier at most 0 tasks is off: the router is told (TIER_OFF, absent while both run), and one tier must run
    // (a rule, checked before any change).
    let router_off = |overrides: &[(&str, &str)]| {
        let mut parameters = vec![("ModelName", "m"), ("LargeModelName", "l"), ("ArtifactBucket", "b")];
        parameters.extend_from_slice(overrides);
        let env = Stack::new("s", &parameters).environment("RouterFunction");
        env.into_iter().find(|(name, _)| name == "TIER_OFF").map(|(_, value)| value)
    };
    assert_eq!(router_off(&[]), None);
    assert_eq!(router_off(&[("LargeModelMaxTaskCount", "0")]).as_deref(), Some("large"));
    assert_eq!(router_off(&[("MaxTaskCount", "0")]).as_deref(), Some("small"));
    for (small, large, runs) in [("10", "4", true), ("0", "4", true), ("10", "0", true), ("0", "0", false)] {
        let stack = Stack::new("s", &[("MaxTaskCount", small), ("LargeModelMaxTaskCount", large)]);
        assert_eq!(stack.rule_holds("OneTierRuns"), runs, "MaxTaskCount {small}, LargeModelMaxTaskCount {large}");
    }

    // Every cron the parameters and the docs give as an example follows the format; the rule itself tells them apart.
    let text = [
        serde_json::to_string(p).unwrap(),
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/configuration.md")).unwrap(),
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/scaling.md")).unwrap(),
    ]
    .join("\n");
    let examples: Vec<&str> =
        text.match_indices("cron(").map(|(at, _)| &text[at..at + text[at..].find(')').unwrap() + 1]).collect();
    assert!(examples.len() >= 4, "{examples:?}");
    for example in examples {
        assert!(is_application_auto_scaling_cron(example), "{example}");
    }
    for wrong in ["cron(0 8 * * MON-FRI *)", "cron(0 8 ? * ? *)", "cron(0 8 * * 1-5)", "0 8 ? * MON-FRI *"] {
        assert!(!is_application_auto_scaling_cron(wrong), "{wrong}");
    }
}

/// The API keys' secret starts as the key document `gpuinfer api-key` and the router read, with no key (so the /v1
/// API refuses every request until a key is added), and the outputs tell how to add one and where OpenAI's clients
/// point.
#[test]
fn the_api_keys_secret_starts_as_an_empty_key_document_and_the_outputs_say_how_to_add_a_key() {
    let t = template();
    let secret = &t["Resources"]["ApiKeysSecret"]["Properties"];
    let document = gpuinfer::KeyDocument::parse(secret["SecretString"].as_str().unwrap());
    assert!(document.expect("a key document").entries().is_empty(), "created without a key");
    assert!(secret.get("GenerateSecretString").is_none(), "its value is the key document, not a password");
    let outputs = &t["Outputs"];
    assert_eq!(outputs["ApiKeysSecretArn"]["Value"], json!({"Ref": "ApiKeysSecret"}));
    assert!(outputs["ApiKeysSecretArn"]["Description"].as_str().unwrap().contains("gpuinfer api-key add --secret-id"));
    let base_url = outputs["OpenAiBaseUrl"]["Value"]["Fn::Sub"].as_str().unwrap();
    assert!(base_url.starts_with("https://${HttpApi}.execute-api.") && base_url.ends_with("/v1"), "{base_url}");
}

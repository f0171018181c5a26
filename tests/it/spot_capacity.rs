//! Each tier's capacity choice (`SmallCapacity`, `LargeCapacity`: on-demand, spot, spot-with-fallback) as
//! CloudFormation would deploy it: which provider the tier's service uses, what a Spot provider launches, the
//! fallback service and what the scaler is told and allowed for it.

use serde_json::{Value, json};

use crate::support::cfn::{ACCOUNT, REGION, Stack, template_at};

const CHOICES: [&str; 3] = ["on-demand", "spot", "spot-with-fallback"];

fn provider_of(stack: &Stack, service: &str) -> Value {
    stack.property(service, "CapacityProviderStrategy").unwrap()[0]["CapacityProvider"].clone()
}

fn launch(stack: &Stack, provider: &str) -> Value {
    stack.property(provider, "ManagedInstancesProvider").unwrap()["InstanceLaunchTemplate"].clone()
}

/// ECS API Reference, UpdateCapacityProvider: its InstanceLaunchTemplateUpdate has no capacityOptionType (AWS Batch,
/// InstanceLaunchTemplateUpdate: "You cannot change capacityOptionType"), so a provider's option is fixed at its
/// creation: a tier moves between On-Demand and Spot by moving its service to another provider (a capacity provider
/// strategy change, which starts a new deployment), never by changing one. Every provider exists and stays
/// associated whatever the choice (ECS refuses to disassociate a provider a service uses: PutClusterCapacityProviders,
/// ResourceInUseException), so leaving Spot changes the service's strategy alone. The On-Demand providers keep the
/// default (no CapacityOptionType), the Spot ones are SPOT, and no provider's option depends on a parameter.
#[test]
fn a_tier_moves_to_spot_by_moving_its_service_to_a_spot_provider_of_its_own() {
    for tier in ["Small", "Large"] {
        for choice in CHOICES {
            let stack = Stack::new("s", &[(&format!("{tier}Capacity"), choice)]);
            let spot = format!("{tier}SpotCapacityProvider");
            let on_spot = choice != "on-demand";
            assert!(stack.deploys(&spot), "{tier} {choice}");
            let associated = stack.property("ClusterCapacity", "CapacityProviders").unwrap();
            assert_eq!(associated.as_array().map(Vec::len), Some(4), "{tier} {choice}: {associated}");
            let expected = if on_spot { spot.clone() } else { format!("{tier}CapacityProvider") };
            let service = format!("{tier}Service");
            assert_eq!(provider_of(&stack, &service), provider_of_resource(&stack, &expected), "{tier} {choice}");
            assert!(launch(&stack, &format!("{tier}CapacityProvider")).get("CapacityOptionType").is_none());
            {
                let template = launch(&stack, &spot);
                assert_eq!(template["CapacityOptionType"], "SPOT", "{tier} {choice}");
                let allowed = &template["InstanceRequirements"]["AllowedInstanceTypes"];
                let default = if tier == "Small" {
                    json!(["g6e.xlarge", "g6e.2xlarge", "g6e.4xlarge"])
                } else {
                    json!(["g6e.48xlarge"])
                };
                assert_eq!(allowed, &default, "{tier}: the types that fit the tier's task");
            }
        }
    }
}

/// What a `Ref` to a resource resolves to, as the service's strategy would name it.
fn provider_of_resource(stack: &Stack, id: &str) -> Value {
    json!(stack.reference(id))
}

/// MaxSpotPriceAsPercentageOfOptimalOnDemandPrice only when a threshold is given. EC2 InstanceRequirements: it is a
/// price protection threshold (instance types priced above it are left out, not a price paid), and "If you don't
/// specify either, Amazon EC2 will automatically apply optimal price protection", which a 0 leaves in place.
#[test]
fn a_spot_price_ceiling_is_set_only_when_given() {
    let ceiling = |percent: &str| {
        let stack = Stack::new("s", &[("SmallCapacity", "spot"), ("SpotMaxPricePercent", percent)]);
        launch(&stack, "SmallSpotCapacityProvider")["InstanceRequirements"]
            .get("MaxSpotPriceAsPercentageOfOptimalOnDemandPrice")
            .cloned()
    };
    assert_eq!(ceiling("0"), None);
    assert_eq!(ceiling("60"), Some(json!("60")));
}

/// spot-with-fallback: a second service of the tier's task on its On-Demand provider, at 0 tasks, named as the scaler
/// derives it (the tier's SERVICE_NAME and `-fallback`), which the scaler is told of (SPOT_FALLBACK_TIERS, the bound)
/// and may set (UpdateService on it alone), reading the Spot tasks' ages (ListTasks in the cluster, DescribeTasks on
/// its tasks). Without it, none of these exists.
#[test]
fn a_tier_on_spot_with_fallback_gets_an_on_demand_service_the_scaler_alone_sets() {
    for choice in CHOICES {
        let stack = Stack::new("s", &[("SmallCapacity", choice), ("SpotFallbackMinutes", "7")]);
        let falls_back = choice == "spot-with-fallback";
        assert_eq!(stack.deploys("SmallFallbackService"), falls_back, "{choice}");
        assert!(!stack.deploys("LargeFallbackService"), "{choice}");
        let env: std::collections::HashMap<String, String> = stack.environment("ScalerFunction").into_iter().collect();
        let statements: Vec<Value> = stack
            .role_policies("ScalerRole")
            .iter()
            .flat_map(|(_, document)| document["Statement"].as_array().unwrap().clone())
            .collect();
        let actions: Vec<String> = statements.iter().map(|statement| statement["Action"].to_string()).collect();
        let fallback_actions = ["ecs:ListTasks", "ecs:DescribeTasks", "ecs:UpdateService"];
        if !falls_back {
            assert_eq!(env.get("SPOT_FALLBACK_TIERS"), None, "{choice}");
            assert!(actions.iter().all(|a| fallback_actions.iter().all(|f| !a.contains(f))), "{choice}: {actions:?}");
            continue;
        }
        for action in fallback_actions {
            assert!(actions.iter().any(|a| a.contains(action)), "{choice}: ScalerRole lacks {action}: {actions:?}");
        }
        assert_eq!(env["SPOT_FALLBACK_TIERS"], "small");
        assert_eq!(env["SPOT_FALLBACK_MINUTES"], "7");
        let pattern = &env["SERVICE_NAME"];
        assert_eq!(
            stack.physical_name("SmallFallbackService"),
            format!("{}-fallback", pattern.replace("{tier}", "small"))
        );
        assert_eq!(
            stack.property("SmallFallbackService", "TaskDefinition"),
            stack.property("SmallService", "TaskDefinition")
        );
        assert_eq!(provider_of(&stack, "SmallFallbackService"), provider_of_resource(&stack, "SmallCapacityProvider"));
        assert_eq!(stack.property("SmallFallbackService", "DesiredCount"), Some(json!(0)));
        let update = statements.iter().find(|statement| statement["Action"] == "ecs:UpdateService").unwrap();
        let arn = format!("arn:aws:ecs:{REGION}:{ACCOUNT}:service/s-cluster/s-small-fallback");
        assert_eq!(update["Resource"], json!([arn]));
    }
}

/// demos/spot-interruption/experiment.yaml drills what template.yaml deploys: its FIS target selects the tier's Spot
/// instances by the tag the tier's Spot provider carries and propagates to them (ECS API Reference,
/// CreateManagedInstancesProviderConfiguration `propagateTags`: "CAPACITY_PROVIDER — Propagates tags to instances"), its
/// role may interrupt only instances with that tag, and its action is AWS FIS's `aws:ec2:send-spot-instance-interruptions`
/// on `aws:ec2:spot-instance` targets, whose `durationBeforeInterruption` is 2 to 15 minutes (AWS FIS User Guide,
/// "Amazon EC2 actions").
#[test]
fn the_spot_interruption_drill_targets_the_tiers_spot_instances_by_the_tag_they_carry() {
    let demo = template_at("demos/spot-interruption/experiment.yaml");
    let experiment = &demo["Resources"]["Experiment"]["Properties"];
    let target = &experiment["Targets"]["SpotInstances"];
    assert_eq!(target["ResourceType"], "aws:ec2:spot-instance");
    let selected = json!({"gpuinfer:spot-tier": {"Fn::Sub": "${StackName}-${Tier}"}});
    assert_eq!(target["ResourceTags"], selected);
    assert_eq!(experiment["Actions"]["Interrupt"]["ActionId"], "aws:ec2:send-spot-instance-interruptions");
    let pattern = demo["Parameters"]["DurationBeforeInterruption"]["AllowedPattern"].as_str().unwrap();
    assert_eq!(pattern, "^PT([2-9]|1[0-5])M$");
    let role =
        demo["Resources"]["ExperimentRole"]["Properties"]["Policies"][0]["PolicyDocument"]["Statement"][0].clone();
    assert_eq!(role["Action"], "ec2:SendSpotInstanceInterruptions");
    assert_eq!(role["Condition"]["StringEquals"]["aws:ResourceTag/gpuinfer:spot-tier"], selected["gpuinfer:spot-tier"]);
    for tier in ["small", "large"] {
        let stack = Stack::new("s", &[("SmallCapacity", "spot"), ("LargeCapacity", "spot")]);
        let provider = format!("{}SpotCapacityProvider", if tier == "small" { "Small" } else { "Large" });
        assert_eq!(
            stack.property(&provider, "ManagedInstancesProvider").unwrap()["PropagateTags"],
            "CAPACITY_PROVIDER"
        );
        let tags = stack.property(&provider, "Tags").unwrap();
        assert!(
            tags.as_array().unwrap().contains(&json!({"Key": "gpuinfer:spot-tier", "Value": format!("s-{tier}")})),
            "{tags}"
        );
    }
}

/// A worker stopping gives work back once its open long poll returns (a SQS receive cannot be dropped: messages it
/// brought would stay invisible); a Spot tier's workers poll 1 s (`WAIT_TIME_SECONDS`), so giving back on a notice waits
/// 1 s, not the default 20 (tests/faults/r7_notice.rs measures it); an On-Demand tier keeps the default.
#[test]
fn a_spot_tiers_workers_long_poll_for_one_second() {
    for (tier, task) in [("Small", "SmallTaskDefinition"), ("Large", "LargeTaskDefinition")] {
        for choice in CHOICES {
            let capacity = format!("{tier}Capacity");
            let models = [("ModelName", "small-model"), ("LargeModelName", "large-model"), (capacity.as_str(), choice)];
            let stack = Stack::new("s", &models);
            let env: std::collections::HashMap<String, String> = stack.environment(task).into_iter().collect();
            let expected = (choice != "on-demand").then_some("1");
            assert_eq!(env.get("WAIT_TIME_SECONDS").map(String::as_str), expected, "{tier} {choice}");
        }
    }
}

//! template.yaml as JSON for the template tests: short-form intrinsics (`!Ref X`) turned into their long
//! form (`{"Ref": "X"}`), and lookups by logical id and resource type.

use serde_json::{Value, json};

/// template.yaml, parsed.
pub(crate) fn template() -> Value {
    template_at("template.yaml")
}

/// A CloudFormation template of the repository (`path` from its root), parsed.
pub(crate) fn template_at(path: &str) -> Value {
    let text = std::fs::read_to_string(std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(path)).unwrap();
    normalize(serde_yaml_ng::from_str(&text).unwrap())
}

fn normalize(value: serde_yaml_ng::Value) -> Value {
    use serde_yaml_ng::Value as Y;
    match value {
        Y::Null => Value::Null,
        Y::Bool(b) => json!(b),
        Y::Number(n) => serde_json::to_value(n).unwrap(),
        Y::String(s) => json!(s),
        Y::Sequence(items) => Value::Array(items.into_iter().map(normalize).collect()),
        Y::Mapping(map) => Value::Object(
            map.into_iter()
                .map(|(k, v)| (k.as_str().map(str::to_owned).unwrap_or_else(|| format!("{k:?}")), normalize(v)))
                .collect(),
        ),
        Y::Tagged(tagged) => {
            let name = tagged.tag.to_string().trim_start_matches('!').to_owned();
            let inner = normalize(tagged.value);
            match name.as_str() {
                "Ref" | "Condition" => json!({ name: inner }),
                "GetAtt" => match inner {
                    Value::String(s) => json!({ "Fn::GetAtt": s.split('.').collect::<Vec<_>>() }),
                    other => json!({ "Fn::GetAtt": other }),
                },
                _ => json!({ format!("Fn::{name}"): inner }),
            }
        }
    }
}

pub(crate) fn resources(template: &Value) -> impl Iterator<Item = (&String, &Value)> {
    template["Resources"].as_object().unwrap().iter()
}

pub(crate) fn of_type<'a>(template: &'a Value, kind: &'a str) -> impl Iterator<Item = (&'a String, &'a Value)> + 'a {
    resources(template).filter(move |(_, r)| r["Type"] == kind)
}

/// The account, region and partition a resolved stack lives in (moto's defaults).
pub(crate) const ACCOUNT: &str = "123456789012";
pub(crate) const REGION: &str = "us-east-1";

/// template.yaml as CloudFormation would deploy it as the stack `name`: parameters (their Default, or an
/// override), pseudo parameters, conditions, and the physical names, URLs and ARNs of its resources.
pub(crate) struct Stack {
    template: Value,
    name: String,
    parameters: serde_json::Map<String, Value>,
}

impl Stack {
    /// `overrides` name parameters of the template (a typo panics). A bucket without a BucketName is named
    /// `{stack}-{logical id in lowercase}`, as CloudFormation would name it less its random suffix.
    pub(crate) fn new(name: &str, overrides: &[(&str, &str)]) -> Self {
        let template = template();
        let mut parameters = serde_json::Map::new();
        for (id, parameter) in template["Parameters"].as_object().unwrap() {
            if let Some(default) = parameter.get("Default") {
                parameters.insert(id.clone(), json!(text(default)));
            }
        }
        for (id, value) in overrides {
            assert!(template["Parameters"].get(id).is_some(), "template.yaml has no parameter {id}");
            parameters.insert((*id).to_owned(), json!(value));
        }
        Stack { template, name: name.to_owned(), parameters }
    }

    /// A role's inline policies as (PolicyName, policy document). Its ManagedPolicyArns are AWS's own
    /// (Lambda VPC access, ECS task execution: logs and network interfaces, no gpuinfer call) and not modelled.
    pub(crate) fn role_policies(&self, role: &str) -> Vec<(String, Value)> {
        let policies = self.resolve(&self.resource(role)["Properties"]["Policies"]).unwrap_or(json!([]));
        policies
            .as_array()
            .unwrap()
            .iter()
            .map(|p| (p["PolicyName"].as_str().unwrap().to_owned(), p["PolicyDocument"].clone()))
            .collect()
    }

    /// The environment a Lambda function (Environment.Variables) or an ECS task definition (its first
    /// container's Environment) gives its process.
    pub(crate) fn environment(&self, resource: &str) -> Vec<(String, String)> {
        let properties = &self.resource(resource)["Properties"];
        match self.resource(resource)["Type"].as_str().unwrap() {
            "AWS::Lambda::Function" => {
                let variables = self.resolve(&properties["Environment"]["Variables"]).unwrap();
                variables.as_object().unwrap().iter().map(|(k, v)| (k.clone(), text(v))).collect()
            }
            "AWS::ECS::TaskDefinition" => {
                let variables = self.resolve(&properties["ContainerDefinitions"][0]["Environment"]).unwrap();
                variables.as_array().unwrap().iter().map(|v| (text(&v["Name"]), text(&v["Value"]))).collect()
            }
            other => panic!("{resource} is a {other}: no process environment"),
        }
    }

    /// A property of a resource as the stack resolves it (None: unset, or AWS::NoValue).
    pub(crate) fn property(&self, resource: &str, name: &str) -> Option<Value> {
        self.resolve(self.resource(resource)["Properties"].get(name)?)
    }

    /// The name a resource gets: QueueName, BucketName, ClusterName, ServiceName… as the template sets it.
    pub(crate) fn physical_name(&self, id: &str) -> String {
        let resource = self.resource(id);
        let kind = resource["Type"].as_str().unwrap();
        let property = kind.rsplit("::").next().unwrap().to_owned() + "Name";
        match resource["Properties"].get(&property).and_then(|v| self.resolve(v)) {
            Some(name) => text(&name),
            None if kind == "AWS::S3::Bucket" => format!("{}-{}", self.name, id.to_lowercase()),
            None => format!("{}-{id}", self.name),
        }
    }

    /// What `!Ref id` gives: a queue's URL, the name of a bucket, cluster, role, log group or function, else
    /// the resource's ARN.
    pub(crate) fn reference(&self, id: &str) -> String {
        match self.resource(id)["Type"].as_str().unwrap() {
            "AWS::SQS::Queue" => format!("https://sqs.{REGION}.amazonaws.com/{ACCOUNT}/{}", self.physical_name(id)),
            "AWS::S3::Bucket"
            | "AWS::ECS::Cluster"
            | "AWS::IAM::Role"
            | "AWS::Logs::LogGroup"
            | "AWS::Lambda::Function" => self.physical_name(id),
            _ => self.arn(id),
        }
    }

    /// What `!GetAtt id.Arn` gives; a resource of a type not listed gets a made-up but stable ARN.
    fn arn(&self, id: &str) -> String {
        let name = self.physical_name(id);
        match self.resource(id)["Type"].as_str().unwrap() {
            "AWS::SQS::Queue" => format!("arn:aws:sqs:{REGION}:{ACCOUNT}:{name}"),
            "AWS::S3::Bucket" => format!("arn:aws:s3:::{name}"),
            "AWS::ECS::Cluster" => format!("arn:aws:ecs:{REGION}:{ACCOUNT}:cluster/{name}"),
            "AWS::IAM::Role" => format!("arn:aws:iam::{ACCOUNT}:role/{name}"),
            "AWS::ECS::Service" => {
                let cluster = text(&self.property(id, "Cluster").unwrap());
                format!("arn:aws:ecs:{REGION}:{ACCOUNT}:service/{cluster}/{name}")
            }
            // A partial ARN: Secrets Manager appends six random characters to a secret's; its API takes either.
            "AWS::SecretsManager::Secret" => format!("arn:aws:secretsmanager:{REGION}:{ACCOUNT}:secret:{name}"),
            kind => {
                let service = kind.split("::").nth(1).unwrap().to_lowercase();
                format!("arn:aws:{service}:{REGION}:{ACCOUNT}:{name}")
            }
        }
    }

    fn resource(&self, id: &str) -> &Value {
        self.template["Resources"].get(id).unwrap_or_else(|| panic!("template.yaml has no resource {id}"))
    }

    fn attribute(&self, id: &str, attribute: &str) -> String {
        match attribute {
            "Arn" => self.arn(id),
            // An ECS service's `Name`: its ServiceName (AWS::ECS::Service, Fn::GetAtt return values).
            "QueueName" | "Name" => self.physical_name(id),
            "QueueUrl" => self.reference(id),
            other => format!("{}/{other}", self.arn(id)),
        }
    }

    /// `!Ref name`: a parameter, a pseudo parameter or a resource; None for AWS::NoValue.
    fn lookup(&self, name: &str) -> Option<String> {
        Some(match name {
            "AWS::NoValue" => return None,
            "AWS::Partition" => "aws".into(),
            "AWS::Region" => REGION.into(),
            "AWS::AccountId" => ACCOUNT.into(),
            "AWS::StackName" => self.name.clone(),
            "AWS::URLSuffix" => "amazonaws.com".into(),
            _ if self.template["Parameters"].get(name).is_some() => {
                let value = self.parameters.get(name);
                text(value.unwrap_or_else(|| panic!("parameter {name} has no Default: give it in the overrides")))
            }
            _ => self.reference(name),
        })
    }

    /// A value with every intrinsic function evaluated; None where it comes out as AWS::NoValue.
    fn resolve(&self, value: &Value) -> Option<Value> {
        let Some(object) = value.as_object() else {
            return Some(match value {
                Value::Array(items) => Value::Array(items.iter().filter_map(|v| self.resolve(v)).collect()),
                other => other.clone(),
            });
        };
        let intrinsic = object.iter().next().filter(|(k, _)| object.len() == 1 && is_intrinsic(k));
        let Some((function, args)) = intrinsic else {
            let resolved = object.iter().filter_map(|(k, v)| Some((k.clone(), self.resolve(v)?)));
            return Some(Value::Object(resolved.collect()));
        };
        let arg = |i: usize| self.resolve(&args[i]).unwrap_or_else(|| panic!("{function}: argument {i} is NoValue"));
        Some(match function.as_str() {
            // A CommaDelimitedList parameter is a list.
            "Ref" if self.template["Parameters"][args.as_str().unwrap()]["Type"] == "CommaDelimitedList" => {
                json!(self.lookup(args.as_str().unwrap())?.split(',').collect::<Vec<_>>())
            }
            "Ref" => json!(self.lookup(args.as_str().unwrap())?),
            "Fn::GetAtt" => {
                let path: Vec<String> = match args {
                    Value::String(s) => s.splitn(2, '.').map(str::to_owned).collect(),
                    _ => args.as_array().unwrap().iter().map(text).collect(),
                };
                json!(self.attribute(&path[0], &path[1]))
            }
            "Fn::Sub" => {
                let (source, variables) = match args {
                    Value::String(s) => (s.clone(), serde_json::Map::new()),
                    _ => (text(&args[0]), arg(1).as_object().unwrap().clone()),
                };
                json!(self.substitute(&source, &variables))
            }
            "Fn::Join" => {
                let parts: Vec<String> = arg(1).as_array().unwrap().iter().map(text).collect();
                json!(parts.join(&text(&args[0])))
            }
            "Fn::Split" => json!(text(&arg(1)).split(&text(&args[0])).collect::<Vec<_>>()),
            "Fn::Select" => arg(1)[text(&arg(0)).parse::<usize>().unwrap()].clone(),
            "Fn::If" => return self.resolve(&args[if self.condition(&text(&args[0])) { 1 } else { 2 }]),
            "Fn::FindInMap" => {
                let path: Vec<String> = (0..3).map(|i| text(&arg(i))).collect();
                self.template["Mappings"][&path[0]][&path[1]][&path[2]].clone()
            }
            other => panic!("the resolver does not know {other}"),
        })
    }

    /// Whether every assertion of the template's rule `name` holds for these parameters, as CloudFormation checks
    /// them before it creates or updates anything.
    pub(crate) fn rule_holds(&self, name: &str) -> bool {
        let rule = self.template["Rules"].get(name).unwrap_or_else(|| panic!("template.yaml has no rule {name}"));
        rule["Assertions"].as_array().unwrap().iter().all(|assertion| self.truth(&assertion["Assert"]))
    }

    /// Whether the stack has resource `id`: it has no Condition, or its condition holds.
    pub(crate) fn deploys(&self, id: &str) -> bool {
        self.resource(id)["Condition"].as_str().is_none_or(|condition| self.condition(condition))
    }

    /// A condition of the template's Conditions section.
    fn condition(&self, name: &str) -> bool {
        let condition = self.template["Conditions"].get(name);
        self.truth(condition.unwrap_or_else(|| panic!("template.yaml has no condition {name}")))
    }

    fn truth(&self, value: &Value) -> bool {
        let (function, args) = value.as_object().and_then(|o| o.iter().next()).unwrap();
        let all = || args.as_array().unwrap().iter();
        match function.as_str() {
            "Fn::Equals" => text(&self.resolve(&args[0]).unwrap()) == text(&self.resolve(&args[1]).unwrap()),
            "Fn::Not" => !self.truth(&args[0]),
            "Fn::And" => all().all(|c| self.truth(c)),
            "Fn::Or" => all().any(|c| self.truth(c)),
            "Condition" => self.condition(args.as_str().unwrap()),
            other => panic!("{other} is not a condition function"),
        }
    }

    /// Fn::Sub's `${Name}`, `${Resource.Attribute}`, `${AWS::…}` (and `${!Literal}`), `variables` first.
    fn substitute(&self, source: &str, variables: &serde_json::Map<String, Value>) -> String {
        let mut out = String::new();
        let mut rest = source;
        while let Some(start) = rest.find("${") {
            out.push_str(&rest[..start]);
            let end = start + rest[start..].find('}').unwrap();
            let name = &rest[start + 2..end];
            out.push_str(&match (name.strip_prefix('!'), variables.get(name), name.split_once('.')) {
                (Some(literal), _, _) => format!("${{{literal}}}"),
                (None, Some(value), _) => text(value),
                (None, None, Some((id, attribute))) if !name.starts_with("AWS::") => self.attribute(id, attribute),
                (None, None, _) => self.lookup(name).unwrap_or_default(),
            });
            rest = &rest[end + 1..];
        }
        out + rest
    }
}

fn is_intrinsic(key: &str) -> bool {
    key == "Ref" || key.starts_with("Fn::")
}

/// A scalar as CloudFormation passes it on: strings as they are, numbers and booleans as their text.
fn text(value: &Value) -> String {
    match value {
        Value::String(s) => s.clone(),
        Value::Number(_) | Value::Bool(_) => value.to_string(),
        other => panic!("{other} is not a scalar"),
    }
}

/// A container's `Environment` entries, each conditional one (`Fn::If [condition, entry, AWS::NoValue]`) as the
/// entry it passes when its condition holds.
pub(crate) fn environment_entries(container: &Value) -> Vec<&Value> {
    container["Environment"].as_array().into_iter().flatten().map(when_it_holds).collect()
}

/// `value`, or the branch a `Fn::If [condition, branch, AWS::NoValue]` takes when its condition holds.
fn when_it_holds(value: &Value) -> &Value {
    match value.get("Fn::If") {
        Some(branches) => &branches[1],
        None => value,
    }
}

/// A role's inline policy statements, each conditional one (`Fn::If [condition, statement, AWS::NoValue]`) as
/// the statement it grants when its condition holds.
pub(crate) fn statements(role: &Value) -> Vec<&Value> {
    role["Properties"]["Policies"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|policy| policy["PolicyDocument"]["Statement"].as_array().unwrap())
        .map(when_it_holds)
        .collect()
}

{{/*
Thresholds at install time (docs/kubernetes.md, "Thresholds"). The exporter's
generators are the only source of PromQL and dashboard JSON: files/ holds their output
with a placeholder, @@ce:<key>:<form>@@, wherever a threshold prints (exporter/chart,
written by scripts/generate-deploy.py). These templates take the packaged thresholds
(files/thresholds.json), lay .Values.thresholds over them as the exporter does,
refuse what the exporter would refuse, and put each value back formatted as Python
formats it there. tests/unit/test_chart_thresholds.py checks the result against
`contention-exporter rules print rules` / `dashboards generate` for the same values.
*/}}

{{- define "ce.meta" -}}
{{- .Files.Get "files/thresholds.json" -}}
{{- end -}}

{{/* A number as Python's str of a float would be: used for alertLabels values. */}}
{{- define "ce.str" -}}
{{- if and (kindIs "float64" .) (eq . (floor .)) -}}{{ printf "%d" (int64 .) }}
{{- else -}}{{ toString . }}{{- end -}}
{{- end -}}

{{/* One PromQL matcher, as exporter/findings/thresholds.py parses it. */}}
{{- define "ce.matcher" -}}
\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*(=~|!~|!=|=)\s*"((?:[^"\\]|\\.)*)"\s*
{{- end -}}

{{/* `selector` normalised (matchers joined by ", "), or a failure naming it. */}}
{{- define "ce.selector" -}}
{{- $body := trim (toString .) -}}
{{- if and (hasPrefix "{" $body) (hasSuffix "}" $body) -}}
{{- $body = $body | trimPrefix "{" | trimSuffix "}" -}}
{{- end -}}
{{- $m := include "ce.matcher" . -}}
{{- if not (regexMatch (printf "^(%s)(,%s)*,?$" $m $m) $body) -}}
{{- fail (printf "thresholds.selector: expected matchers like job=\"contention-exporter\" (label, =, =~, != or !~, a double-quoted value; several separated by commas), got %q" (toString .)) -}}
{{- end -}}
{{- $out := list -}}
{{- range regexFindAll $m $body -1 -}}
{{- $out = append $out (regexReplaceAll $m . "${1}${2}\"${3}\"") -}}
{{- end -}}
{{- join ", " $out -}}
{{- end -}}

{{/*
The effective thresholds, as JSON: the packaged ones with .Values.thresholds over
them, normalised as exporter/findings/thresholds.py does (a label list given as one
string, empty values, the selector, alertSeverity per finding kind), after the checks
its schema cannot express. values.schema.json has already refused unknown keys, wrong
types and values out of bounds.
*/}}
{{- define "ce.thresholds" -}}
{{- $meta := include "ce.meta" . | fromJson -}}
{{- $given := deepCopy (.Values.thresholds | default dict) -}}
{{- $t := deepCopy $meta.defaults -}}
{{- range $k, $v := $given -}}
{{- if eq $k "alertSeverity" -}}
{{- $_ := set $t $k (merge (deepCopy ($v | default dict)) $meta.defaults.alertSeverity) -}}
{{- else -}}
{{- $_ := set $t $k $v -}}
{{- end -}}
{{- end -}}
{{- if kindIs "string" $t.nodeLabels -}}{{- $_ := set $t "nodeLabels" (list $t.nodeLabels) -}}{{- end -}}
{{- $disabled := $t.disabledAlerts | default list -}}
{{- if kindIs "string" $disabled -}}{{- $disabled = list $disabled -}}{{- end -}}
{{- $_ := set $t "disabledAlerts" ($disabled | uniq | sortAlpha) -}}
{{- $_ = set $t "clusterLabel" (toString ($t.clusterLabel | default "")) -}}
{{- $_ = set $t "runbookUrl" (regexReplaceAll "#+$" (toString ($t.runbookUrl | default "")) "") -}}
{{- $_ = set $t "alertLabels" ($t.alertLabels | default dict) -}}
{{- $_ = set $t "selector" (include "ce.selector" $t.selector) -}}
{{- range $key := list "runqP99Ms" "criticalRunqP99Ms" -}}
{{- $ms := get $t $key -}}
{{- if not (hasKey $meta.bounds (printf "%v" (float64 $ms))) -}}
{{- fail (printf "thresholds.%s: %v ms is not a run-queue histogram bound; choose one of %s" $key $ms (join ", " $meta.boundOrder)) -}}
{{- end -}}
{{- end -}}
{{- if gt (float64 $t.sustainMinutes) (float64 $t.windowMinutes) -}}
{{- fail "thresholds: sustainMinutes must not exceed windowMinutes" -}}
{{- end -}}
{{- if gt (float64 $t.throttledRatioMax) (float64 $t.throttledRatio) -}}
{{- fail (printf "thresholds: throttledRatioMax (%v) above throttledRatio (%v) would leave throttled containers with no finding" $t.throttledRatioMax $t.throttledRatio) -}}
{{- end -}}
{{- if lt (float64 $t.criticalRunqP99Ms) (float64 $t.runqP99Ms) -}}
{{- fail "thresholds: criticalRunqP99Ms must be >= runqP99Ms" -}}
{{- end -}}
{{- range $k := keys $t.alertLabels | sortAlpha -}}
{{- if has $k $meta.reservedAlertLabels -}}
{{- fail (printf "thresholds.alertLabels: %q is set by the rule pack itself; these cannot be replaced: %s" $k (join ", " $meta.reservedAlertLabels)) -}}
{{- end -}}
{{- end -}}
{{- $unknown := list -}}
{{- range $t.disabledAlerts -}}{{- if not (has . $meta.alerts) -}}{{- $unknown = append $unknown . -}}{{- end -}}{{- end -}}
{{- if $unknown -}}
{{- fail (printf "thresholds.disabledAlerts: no alert named %s; the pack's alerts: %s" (join ", " $unknown) ($meta.alerts | sortAlpha | join ", ")) -}}
{{- end -}}
{{- if or .Values.prometheusRule.enabled .Values.dashboards.enabled -}}
{{- range $key, $kind := $meta.kinds -}}
{{- if and (eq $kind "shape") (ne (toJson (get $t $key)) (toJson (get $meta.defaults $key))) -}}
{{- fail (printf "thresholds.%s: the chart's alert rules and dashboards are built for %s: %s (it shapes their terms, ranges and joins, not only their numbers, so the chart cannot change it at install). Generate rules and dashboards for your value with `contention-exporter rules generate --config.file` and `dashboards generate --config.file`, deploy those, and set prometheusRule.enabled=false and dashboards.enabled=false: the exporter then takes %s=%s from the thresholds ConfigMap (docs/kubernetes.md, \"Thresholds\")" $key $key (toJson (get $meta.defaults $key)) $key (toJson (get $t $key))) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- range $key, $_ := $meta.derived -}}
{{- $_ := set $t $key (include (printf "ce.derived.%s" $key) $t | float64) -}}
{{- end -}}
{{- toJson $t -}}
{{- end -}}

{{/* A Prometheus duration in seconds. */}}
{{- define "ce.durationSeconds" -}}
{{- $ms := dict "ms" 1 "s" 1000 "m" 60000 "h" 3600000 "d" 86400000 "w" 604800000 "y" 31536000000 -}}
{{- $total := 0.0 -}}
{{- range regexFindAll "[0-9]+(ms|s|m|h|d|w|y)" (toString .) -1 -}}
{{- $total = addf $total (mulf (regexFind "^[0-9]+" . | float64) (get $ms (regexFind "[a-z]+$" .))) -}}
{{- end -}}
{{- divf $total 1000 -}}
{{- end -}}

{{/* Values the generators compute from several keys (exporter/chart/kinds.py,
DERIVED), computed the same way. Argument: the effective thresholds. */}}
{{- define "ce.derived.samplerStaleFiringSeconds" -}}
{{- addf .samplerStaleSeconds (include "ce.durationSeconds" .samplerStaleFor | float64) -}}
{{- end -}}

{{/* How a value prints in each form (exporter/chart/kinds.py, FORMS): as Python's
str, format() or json.dumps print it there. Argument: (list value bounds). */}}
{{- define "ce.form.num" -}}
{{- $v := float64 (index . 0) -}}
{{- if eq $v (floor $v) -}}{{ printf "%d" (int64 $v) }}
{{- else if lt (mulf $v $v) 0.00000001 -}}{{ printf "%v" $v }}
{{- else -}}{{ toJson $v }}{{- end -}}
{{- end -}}
{{- define "ce.form.g" -}}{{ printf "%.6g" (float64 (index . 0)) }}{{- end -}}
{{- define "ce.form.pct0" -}}{{ printf "%.0f%%" (include "ce.times100" (index . 0) | float64) }}{{- end -}}
{{- define "ce.form.pct100g" -}}{{ printf "%.6g" (include "ce.times100" (index . 0) | float64) }}{{- end -}}

{{/* v * 100 in float64 arithmetic, as Python computes it (sprig's mulf is decimal:
0.575 * 100 is 57.5 there, 57.49999999999999 in Python, 57 % once rounded): the
exact decimal expansion of v, its point moved two places, parsed back (a correctly
rounded product). For 0 <= v < 10^9. */}}
{{- define "ce.times100" -}}
{{- $parts := splitList "." (printf "%.1100f" (float64 .)) -}}
{{- $frac := index $parts 1 -}}
{{- printf "%s%s.%s" (index $parts 0) (substr 0 2 $frac) (substr 2 (len $frac) $frac) -}}
{{- end -}}
{{/* A float as json.dumps writes it (Python's repr: 1000.0, 1e-05). */}}
{{- define "ce.form.json" -}}
{{- $v := float64 (index . 0) -}}
{{- if eq $v (floor $v) -}}{{ printf "%d.0" (int64 $v) }}
{{- else -}}{{ include "ce.form.num" . }}{{- end -}}
{{- end -}}
{{- define "ce.form.jsonint" -}}{{ printf "%d" (int64 (index . 0)) }}{{- end -}}
{{- define "ce.form.msg" -}}{{ printf "%.6g ms" (float64 (index . 0)) }}{{- end -}}
{{- define "ce.form.le" -}}
{{- (get (index . 1) (printf "%v" (float64 (index . 0)))).le -}}
{{- end -}}
{{- define "ce.form.seconds" -}}
{{- include "ce.form.json" (list (get (index . 1) (printf "%v" (float64 (index . 0)))).seconds) -}}
{{- end -}}
{{- define "ce.form.raw" -}}{{ toString (index . 0) }}{{- end -}}

{{/* A generated file (JSON text) with every placeholder replaced by its value:
inside a string, the value's text JSON-escaped; a number's placeholder (a string of
its own) by the number. Argument: (list text context). */}}
{{- define "ce.fill" -}}
{{- $text := index . 0 -}}
{{- $ctx := index . 1 -}}
{{- $meta := include "ce.meta" $ctx | fromJson -}}
{{- $t := include "ce.thresholds" $ctx | fromJson -}}
{{- range $tok := $meta.tokens -}}
{{- $key := index $tok 0 -}}
{{- $form := index $tok 1 -}}
{{- $path := splitList "." $key -}}
{{- $v := get $t (first $path) -}}
{{- if gt (len $path) 1 -}}{{- $v = get $v (last $path) -}}{{- end -}}
{{- $shown := include (printf "ce.form.%s" $form) (list $v $meta.bounds) -}}
{{- $placeholder := printf "@@ce:%s:%s@@" $key $form -}}
{{- if has $form (list "json" "jsonint" "seconds") -}}
{{- $text = replace (printf "%q" $placeholder) $shown $text -}}
{{- else -}}
{{- $text = replace $placeholder (toJson $shown | trimPrefix "\"" | trimSuffix "\"") $text -}}
{{- end -}}
{{- end -}}
{{- $text -}}
{{- end -}}

{{/* The rule groups for the installed thresholds, as JSON: the placeholders filled,
then what exporter/rules/alert.py and pack.py do with the rule-pack keys: the
disabled alerts left out (and a group left empty), alertLabels on every alert (over
its own labels), and with runbookUrl empty each alert's annotations without it. */}}
{{- define "ce.ruleGroups" -}}
{{- $t := include "ce.thresholds" . | fromJson -}}
{{- $data := include "ce.fill" (list (.Files.Get "files/contention.rules.json") .) | fromJson -}}
{{- $groups := list -}}
{{- range $g := $data.groups -}}
{{- $rules := list -}}
{{- range $r := $g.rules -}}
{{- if not (and $r.alert (has $r.alert $t.disabledAlerts)) -}}
{{- if $r.alert -}}
{{- $labels := dict -}}
{{- range $k, $v := $t.alertLabels -}}{{- $_ := set $labels $k (include "ce.str" $v) -}}{{- end -}}
{{- $_ := set $r "labels" (merge $labels $r.labels) -}}
{{- if not $t.runbookUrl -}}
{{- $change := get $data.runbookUnset $r.alert -}}
{{- range $change.remove -}}{{- $_ := unset $r.annotations . -}}{{- end -}}
{{- range $k, $v := $change.set -}}{{- $_ := set $r.annotations $k $v -}}{{- end -}}
{{- end -}}
{{- end -}}
{{- $rules = append $rules $r -}}
{{- end -}}
{{- end -}}
{{- if $rules -}}
{{- $_ := set $g "rules" $rules -}}
{{- $groups = append $groups $g -}}
{{- end -}}
{{- end -}}
{{- toJson $groups -}}
{{- end -}}

{{/* The dashboards for the installed thresholds: file name -> JSON text. */}}
{{- define "ce.dashboards" -}}
{{- $out := dict -}}
{{- range $path, $_ := .Files.Glob "files/dashboards/*.json" -}}
{{- $_ := set $out (base $path) (include "ce.fill" (list ($.Files.Get $path) $)) -}}
{{- end -}}
{{- toJson $out -}}
{{- end -}}

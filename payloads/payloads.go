// Package payloads embeds real GitHub webhook payloads (from @octokit/webhooks-examples)
// for tests, benchmarks and the producer simulator.
package payloads

import (
	"embed"
	"path"
	"sort"
	"strings"
)

//go:embed testdata/octokit/*.json
var files embed.FS

// noAction is the file-name placeholder for events whose payload has no action.
const noAction = "none"

// Example is one vendored webhook payload.
type Example struct {
	// Event is the webhook name GitHub sends in X-GitHub-Event, e.g. "pull_request".
	Event string
	// Action is the payload's action field; empty for events without one (push, create, delete).
	Action string
	// Name identifies the example: "{event}.{action or none}.{n}", its file name without ".json".
	Name string
	// Body is the payload exactly as vendored.
	Body []byte
}

// All returns every vendored example, sorted by Name. Each call returns fresh copies,
// so callers may modify the bodies.
func All() []Example {
	entries, err := files.ReadDir("testdata/octokit")
	if err != nil {
		// The directory is embedded at build time; failing to read it is a build defect.
		panic("payloads: read embedded examples: " + err.Error())
	}
	examples := make([]Example, 0, len(entries))
	for _, e := range entries {
		name := strings.TrimSuffix(e.Name(), ".json")
		parts := strings.Split(name, ".")
		if len(parts) != 3 {
			panic("payloads: example file name is not {event}.{action}.{n}.json: " + e.Name())
		}
		body, err := files.ReadFile(path.Join("testdata/octokit", e.Name()))
		if err != nil {
			panic("payloads: read embedded example: " + err.Error())
		}
		action := parts[1]
		if action == noAction {
			action = ""
		}
		examples = append(examples, Example{Event: parts[0], Action: action, Name: name, Body: body})
	}
	sort.Slice(examples, func(a, b int) bool { return examples[a].Name < examples[b].Name })
	return examples
}

// Find returns the examples of event with the given action, sorted by Name. An empty
// action matches every action of the event (and the events that have none).
func Find(event, action string) []Example {
	var found []Example
	for _, e := range All() {
		if e.Event == event && (action == "" || e.Action == action) {
			found = append(found, e)
		}
	}
	return found
}

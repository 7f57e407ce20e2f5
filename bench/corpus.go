package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"sync/atomic"

	"github.com/brokerswitch/brokerswitch/payloads"
)

// The corpus is the vendored @octokit payloads, edited as payloads.Lifecycle edits them
// (each pull request and issue its own entity going through opened … closed), plus the
// comments, reviews, pushes and installations that land on the other queues. Building
// 50,000 events with payloads.Build would decode and encode each 25 KB payload; instead
// each kind is built once with placeholders that are then replaced per entity.

// Placeholders: digits and letters that appear in no vendored payload.
const (
	phNode   = "BSNODEPLACEHOLDER"
	phTitle  = "BSTITLEPLACEHOLDER"
	phID     = "7170717071707"
	phNumber = "71707171"
)

// unitKind is one event of a unit.
type unitKind struct {
	event, action string
	objectKey     string // the object whose identity is replaced per entity, "" for none
	idBase        int
}

// template is a unit's event with the placeholders in its body.
type template struct {
	unitKind
	body []byte
}

// unitKinds are the events of one unit, in publishing order: 8 on pull_requests, 6 on
// issues, 2 on pushes and 2 on installations.
func unitKinds() []unitKind {
	return []unitKind{
		{"pull_request", "opened", "pull_request", 9_000_000},
		{"issues", "opened", "issue", 8_000_000},
		{"push", "", "", 0},
		{"pull_request", "synchronize", "pull_request", 9_000_000},
		{"pull_request_review", "submitted", "review", 7_000_000},
		{"issue_comment", "created", "comment", 6_000_000},
		{"installation", "created", "", 0},
		{"pull_request", "closed", "pull_request", 9_000_000},
		{"issues", "edited", "issue", 8_000_000},
		{"pull_request_review_comment", "created", "comment", 5_000_000},
		{"create", "", "", 0},
		{"pull_request", "synchronize", "pull_request", 9_000_000},
		{"issues", "closed", "issue", 8_000_000},
		{"pull_request", "reopened", "pull_request", 9_000_000},
		{"issues", "edited", "issue", 8_000_000},
		{"installation_repositories", "added", "", 0},
		{"pull_request", "closed", "pull_request", 9_000_000},
		{"issues", "reopened", "issue", 8_000_000},
	}
}

// corpusMaker hands out events built from the templates, each entity numbered across the
// whole run so that no two events of different figures collide, whatever database they
// land in.
type corpusMaker struct {
	templates []template
	entitySeq atomic.Int64
}

func newCorpusMaker() (*corpusMaker, error) {
	c := &corpusMaker{}
	for _, k := range unitKinds() {
		ev, err := payloads.Build(k.event, k.action, func(p map[string]any) {
			if k.action != "" {
				p["action"] = k.action
			}
			obj, _ := p[k.objectKey].(map[string]any)
			if obj == nil {
				return
			}
			obj["node_id"], obj["id"] = phNode, json.Number(phID)
			if _, ok := obj["number"]; ok {
				obj["number"] = json.Number(phNumber)
			}
			if _, ok := obj["title"]; ok {
				obj["title"] = phTitle
			}
			switch k.action {
			case "closed":
				obj["state"] = "closed"
				obj["merged"] = false
			case "opened", "reopened":
				obj["state"] = "open"
			}
		})
		if err != nil {
			return nil, err
		}
		c.templates = append(c.templates, template{unitKind: k, body: ev.Body})
	}
	return c, nil
}

// corpus returns n events in publishing order.
func (c *corpusMaker) corpus(n int) []payloads.Event {
	out := make([]payloads.Event, 0, n)
	for len(out) < n {
		k := int(c.entitySeq.Add(1))
		for _, t := range c.templates {
			if len(out) == n {
				break
			}
			body := t.body
			if t.objectKey != "" {
				// Entity k's identity: node id objectKey_bs_k, id idBase+k, number k.
				body = bytes.ReplaceAll(body, []byte(phNode), fmt.Appendf(nil, "%s_bs_%d", t.objectKey, k))
				body = bytes.ReplaceAll(body, []byte(phID), fmt.Appendf(nil, "%d", t.idBase+k))
				body = bytes.ReplaceAll(body, []byte(phNumber), fmt.Appendf(nil, "%d", k))
				body = bytes.ReplaceAll(body, []byte(phTitle), fmt.Appendf(nil, "%s %d", t.objectKey, k))
			}
			out = append(out, payloads.Event{
				Queue:      payloads.QueueFor(t.event),
				Event:      t.event,
				Action:     t.action,
				DeliveryID: payloads.NewDeliveryID(),
				Body:       body,
			})
		}
	}
	return out
}

// stream hands out the corpus one event at a time, in publishing order, so that a steady
// producer feeds every queue as the corpus does.
func (c *corpusMaker) stream() (next func() payloads.Event) {
	var buf []payloads.Event
	return func() payloads.Event {
		if len(buf) == 0 {
			buf = c.corpus(len(c.templates))
		}
		ev := buf[0]
		buf = buf[1:]
		return ev
	}
}

// corpusStats describes a corpus: events per queue and body sizes.
type corpusStats struct {
	PerQueue            map[string]int
	MinKB, AvgKB, MaxKB float64
}

func describe(events []payloads.Event) corpusStats {
	st := corpusStats{PerQueue: map[string]int{}, MinKB: 1e9}
	var sum float64
	for _, ev := range events {
		st.PerQueue[ev.Queue]++
		kb := float64(len(ev.Body)) / 1024
		sum += kb
		st.MinKB = min(st.MinKB, kb)
		st.MaxKB = max(st.MaxKB, kb)
	}
	if len(events) > 0 {
		st.AvgKB = sum / float64(len(events))
	}
	return st
}

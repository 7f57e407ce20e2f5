//go:build integration

package e2e

import (
	"go.temporal.io/api/workflowservice/v1"
)

func countRequest(query string) *workflowservice.CountWorkflowExecutionsRequest {
	return &workflowservice.CountWorkflowExecutionsRequest{Query: query}
}

func listRequest(query string) *workflowservice.ListWorkflowExecutionsRequest {
	return &workflowservice.ListWorkflowExecutionsRequest{Query: query}
}

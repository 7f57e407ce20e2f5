package main

import (
	"testing"

	"github.com/stretchr/testify/require"
	commonpb "go.temporal.io/api/common/v1"
	historypb "go.temporal.io/api/history/v1"
	"go.temporal.io/sdk/converter"

	"github.com/brokerswitch/brokerswitch/activities"
)

func scheduled(id int64, activityType string) *historypb.HistoryEvent {
	return &historypb.HistoryEvent{EventId: id, Attributes: &historypb.HistoryEvent_ActivityTaskScheduledEventAttributes{
		ActivityTaskScheduledEventAttributes: &historypb.ActivityTaskScheduledEventAttributes{ActivityType: &commonpb.ActivityType{Name: activityType}},
	}}
}

func completedEvent(t *testing.T, id, scheduledID int64, result any) *historypb.HistoryEvent {
	t.Helper()
	payloads, err := converter.GetDefaultDataConverter().ToPayloads(result)
	require.NoError(t, err)
	return &historypb.HistoryEvent{EventId: id, Attributes: &historypb.HistoryEvent_ActivityTaskCompletedEventAttributes{
		ActivityTaskCompletedEventAttributes: &historypb.ActivityTaskCompletedEventAttributes{ScheduledEventId: scheduledID, Result: payloads},
	}}
}

// A run's history gives the activities that completed, by the type they were scheduled
// with, and what each Leftover Drain took from PrepareWindow's result.
func TestHistoryGivesCompletedActivitiesAndLeftovers(t *testing.T) {
	run := runHistory{Events: []*historypb.HistoryEvent{
		scheduled(5, "PrepareWindow"),
		scheduled(6, "DrainCheck"),
		completedEvent(t, 7, 5, activities.PreparedWindow{Drained: activities.LeftoverDrainResult{Taken: map[int]int{1: 300, 2: 200}}}),
		scheduled(8, "DrainCheck"), // scheduled, never completed
		completedEvent(t, 9, 6, nil),
		scheduled(10, "PrepareWindow"),
		completedEvent(t, 11, 10, activities.PreparedWindow{Drained: activities.LeftoverDrainResult{Taken: map[int]int{}}}),
	}}
	require.Equal(t, 1, activityCount(run, "DrainCheck"))
	require.Equal(t, 2, activityCount(run, "PrepareWindow"))
	require.Zero(t, activityCount(run, "CommitHop"))
	require.Equal(t, []int{500}, leftoverTaken(run), "a drain that took nothing is no cycle")
}

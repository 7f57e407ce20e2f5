#!/usr/bin/env bash
# The tests of `make test` (all) and of `make test-rabbitmq4` (rabbitmq4), on 2 cores: what
# shares nothing runs side by side, in two lanes.
#   e2e lane:      e2e on 3.10, then the 4.0 e2e runs, classic then quorum. The e2e runs
#                  never overlap one another: their serial tests assert timings.
#   packages lane: every other package on 3.10, then broker and errorqueue on 4.0, classic
#                  and quorum side by side (each test has a vhost of its own, nothing is
#                  broker-wide), then the quorum activities tests, then (all) the alert
#                  rules' tests.
# e2e is the long pole and mostly waits (windows, grace periods, worker processes); the
# packages lane, which mostly computes under -race, fits beside it (measured: the e2e lane
# about 640 s, the packages lane 190-240 s; docs/development.md, "Where CI's time goes").
# Every step runs to its end whatever another did; the script fails when any failed. Each
# step's output is printed whole when its lane ends (scripts/jobs.sh).
#   scripts/test.sh all|rabbitmq4
set -euo pipefail
cd "$(dirname "$0")/.."
JOBS_PREFIX=test
. scripts/jobs.sh

GO=${GO:-go}
# The RabbitMQ 4.0 pass: the packages (broker, and the quarantine that moves its poison;
# errorqueue, whose lists must never bring a quorum queue's message to 4.0's default
# delivery limit) and scenarios that depend on the
# broker's version and queue type (switch, double rotation, two workers, reversed
# notifications, rolling restart, a start with the other type, a killed worker's
# take-over, a straggler on a spare), each with classic and with quorum queues. Not
# ./ingest/: its tests hand deliveries to the Ingester in memory and never dial a broker,
# so a second and third run would test nothing new.
RABBITMQ4_API=${RABBITMQ4_API:-http://127.0.0.1:15673}
RABBITMQ4_PACKAGES=(./broker/ ./broker/quarantine/ ./errorqueue/)
RABBITMQ4_E2E='^(TestScenario02RotationWithABacklog|TestScenario05DoubleRotationHopByHop|TestScenario13TwoWorkerProcesses|TestScenario13bTwoWorkersOnAProducersQuorumQueues|TestScenario14ReversedNotificationsKeepTheMiddleBroker|TestARollingRestartOfTwoWorkersLosesNothing|TestAStartAgainstQueuesOfTheOtherTypeFails|TestAKilledWorkersQueuesAreTakenOverWithinSeconds|TestAStragglerOnASpareIsAppliedWithinAMinute)$'
# On quorum queues only, where deliveries come back and consumers go in the queue's own
# time: the forced switch with a backlog, a force with a hop out and a return, the
# un-notified hold, the window and the Leftover Drain cut off from Temporal, the Leftover
# Drain's tests against real marks, and a window letting go of the broker the producer left.
RABBITMQ4_QUORUM_E2E='^(TestScenario07ForcedSwitchMidDrainAndCancel|TestScenario20AForceAHopOutAndAReturn|TestScenario18aPublishBeforeANotificationLateBySeconds|TestScenario18cPublishWithoutANotification|TestAWindowCutOffFromTemporalGivesItsBatchBack|TestALeftoverDrainCutOffFromTemporalGivesItsBatchBack)$'
RABBITMQ4_QUORUM_ACTIVITIES='^(TestASpareAheadWaitsForTheActiveBacklog|TestASpareAheadWaitsForTheActiveBrokersUnacknowledgedBacklog|TestAReturnToASpareSeenEmptyAfterTheProducerLeftWaits|TestWhatAForcedBrokerHoldsWhenWeLeaveItIsAStraggler|TestAnUnannouncedReturnToTheBrokerAHopLeftWaits|TestWhatAConsumerHeldWhenTheHopCommittedIsAStraggler|TestAWindowOnTheBrokerTheProducerLeftLetsGoOfItsConsumerWhileItIsQuiet)$'

gotest() { "$GO" test -tags integration -race -count=1 -timeout 20m "$@"; }
# r4 TYPE COMMAND...: COMMAND against the 4.0 node, declaring TYPE queues.
r4() {
	local type=$1
	shift
	BROKERSWITCH_TEST_RABBITMQ=$RABBITMQ4_API BROKERSWITCH_TEST_QUEUE_TYPE=$type "$@"
}

e2e_lane() {
	local rc=0
	if [ "$1" = all ]; then
		step e2e gotest ./e2e/ || rc=1
	fi
	step rabbitmq4-e2e-classic r4 classic gotest -run "$RABBITMQ4_E2E" ./e2e/ || rc=1
	step rabbitmq4-e2e-quorum r4 quorum gotest -run "$RABBITMQ4_E2E|$RABBITMQ4_QUORUM_E2E" ./e2e/ || rc=1
	return "$rc"
}

packages_lane() {
	local rc=0
	if [ "$1" = all ]; then
		# shellcheck disable=SC2046 # one word a package
		step packages gotest $("$GO" list -tags integration ./... | grep -v '/e2e$') || rc=1
	fi
	start rabbitmq4-classic r4 classic gotest "${RABBITMQ4_PACKAGES[@]}"
	start rabbitmq4-quorum r4 quorum gotest "${RABBITMQ4_PACKAGES[@]}"
	finish_all || rc=1
	step rabbitmq4-activities-quorum r4 quorum gotest -run "$RABBITMQ4_QUORUM_ACTIVITIES" ./activities/ || rc=1
	if [ "$1" = all ]; then
		# promtool's unit tests of the alert rules. On a fresh clone promtool builds here
		# (minutes of both cores): after the packages, beside e2e's parallel tests, which
		# mostly wait, rather than beside its serial ones, which assert timings.
		step alerts "${MAKE:-make}" --no-print-directory test-alerts || rc=1
	fi
	return "$rc"
}

mode=${1:-all}
case $mode in all | rabbitmq4) ;; *)
	echo "usage: $0 all|rabbitmq4" >&2
	exit 2
	;;
esac
# Compile what every run shares once, before they start side by side and each compiles it.
"$GO" build -race -tags integration ./...
start e2e-lane e2e_lane "$mode"
start packages-lane packages_lane "$mode"
finish_all

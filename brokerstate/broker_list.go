package brokerstate

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/brokerswitch/brokerswitch/models"
)

// keyBrokerList is the broker list as the workers were last started with it, by host and
// vhost in RABBITMQ_CONNECTION_STRINGS' order.
const keyBrokerList = "broker.configured_list"

// errBrokerListMismatch is wrapped into CheckBrokerList's error when the list differs from
// the one the workers recorded.
var errBrokerListMismatch = errors.New("the broker list differs from the workers'")

// RecordBrokerList records s.Brokers as the workers' broker list. A worker calls it at
// start, so that the API can check its own list against it (CheckBrokerList).
func (s *Store) RecordBrokerList(ctx context.Context) error {
	b, err := json.Marshal(s.Brokers)
	if err != nil {
		return fmt.Errorf("record the broker list: %w", err)
	}
	if err := upsertSettings(s.DB.WithContext(ctx), map[string]string{keyBrokerList: string(b)}); err != nil {
		return fmt.Errorf("record the broker list: %w", err)
	}
	return nil
}

// CheckBrokerList compares s.Brokers with the list the workers recorded. The API's list
// comes from a ConfigMap without credentials and the workers' from the Secret; each is
// kept in order by hand, and an index means a broker in both: POST /switch/:index with
// lists out of step would force a broker other than the one the API shows. It returns nil
// when they are the same or no worker has recorded one yet, and an error wrapping
// errBrokerListMismatch that names the first index that differs otherwise.
func (s *Store) CheckBrokerList(ctx context.Context) error {
	var row models.Setting
	err := s.DB.WithContext(ctx).Where("key = ?", keyBrokerList).Limit(1).Find(&row).Error
	if err != nil {
		return fmt.Errorf("read the workers' broker list: %w", err)
	}
	if row.Key == "" {
		return nil
	}
	var theirs []Ref
	if err := json.Unmarshal([]byte(row.Value), &theirs); err != nil {
		return fmt.Errorf("read the workers' broker list: %w", err)
	}
	for i := range max(len(theirs), len(s.Brokers)) {
		switch {
		case i >= len(s.Brokers):
			return fmt.Errorf("%w: the workers have broker #%d (%s), this list ends at #%d", errBrokerListMismatch, i, refName(theirs[i]), i-1)
		case i >= len(theirs):
			return fmt.Errorf("%w: this list has broker #%d (%s), the workers' ends at #%d", errBrokerListMismatch, i, refName(s.Brokers[i]), i-1)
		case theirs[i] != s.Brokers[i]:
			return fmt.Errorf("%w: broker #%d is %s here but %s for the workers", errBrokerListMismatch, i, refName(s.Brokers[i]), refName(theirs[i]))
		}
	}
	return nil
}

// refName names a broker as host/vhost.
func refName(r Ref) string { return r.Host + "/" + r.Vhost }

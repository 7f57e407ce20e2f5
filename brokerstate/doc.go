// Package brokerstate holds the broker state, the source of truth of which broker is
// read: its types and the pure rules that change it (notifications, hops, forces,
// cancels, the producer's trail, the spares' marks), Store that keeps it in
// Postgres under one lock, and StateWatcher that LISTENs for its changes.
//
// It is apart from models because it is the service's decision logic, not a table: models
// holds the schema and the row models, and knows nothing of brokers; brokerstate stores
// its state in models' settings and spare_marks tables.
package brokerstate

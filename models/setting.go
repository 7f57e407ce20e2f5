package models

import "time"

// Setting is one row of the settings table: a key and its text value. The broker state
// is kept in it (brokerstate.Store); the row model lives here with the other
// tables, so that the schema test checks it against the migrations.
type Setting struct {
	Key       string `gorm:"primaryKey"`
	Value     string `gorm:"not null"`
	UpdatedAt time.Time
}

// TableName keeps gorm on the table the migrations create.
func (Setting) TableName() string { return "settings" }

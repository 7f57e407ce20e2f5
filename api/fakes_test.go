package api

// Test tokens and the password of the fake brokers, which must never show in an answer.
const (
	operatorToken = "op-7f3c9d0e-secret"
	producerToken = "prod-41aa2b6c-secret"
	brokerPass    = "Sup3r-S3cret-pw"
)

// fakeBrokers are two brokers nobody dials: tests without a worker never reach them.
const fakeBrokers = "amqp://user:" + brokerPass + "@Rabbit-A.example.com/vh-a," +
	"amqps://user:" + brokerPass + "@rabbit-b.example.com/prod%2Fone"

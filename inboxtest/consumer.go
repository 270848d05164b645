package inboxtest

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"
)

// Routed sets msg's context to carry the handler name consumer, as a Watermill Router
// handler of that name does for every message it delivers, and returns msg. The inbox
// names its consumer after the handler (message.HandlerNameFromCtx) unless
// inbox.Config.Consumer is set, so with Routed a test can deliver a message to an inbox
// configured exactly as in production, without a Router:
//
//	msg := inboxtest.Routed("billing", message.NewMessage("order-1", payload))
//	res := inboxtest.Deliver(ib.Middleware(handler), msg) // keys filed under "billing"
//
// Watermill has no public setter for the handler name, so Routed learns how the Router
// carries it by running one real Router handler of that name, once per name, and then
// lends that value, and only that value, to msg's context. Everything else about msg's
// context (its values, deadline and cancellation) stays as it was.
func Routed(consumer string, msg *message.Message) *message.Message {
	named, err := routedContext(consumer)
	if err != nil {
		panic(err) // a gochannel Router in memory does not fail; if it does, the test cannot go on
	}
	msg.SetContext(consumerContext{Context: msg.Context(), named: named, consumer: consumer})
	return msg
}

// consumerContext is a context that also answers the Router's handler-name lookup.
type consumerContext struct {
	context.Context
	named    context.Context // a Router handler's message context, whose name is consumer
	consumer string
}

func (c consumerContext) Value(key any) any {
	if v := c.Context.Value(key); v != nil {
		return v
	}
	// Lend only the handler's name: any other value of the Router's context (its
	// cancellation among them) stays out.
	if v, ok := c.named.Value(key).(string); ok && v == c.consumer {
		return v
	}
	return nil
}

var routedContexts sync.Map // consumer name -> context.Context

// routedContext returns the context a Router handler named consumer gives its messages.
func routedContext(consumer string) (context.Context, error) {
	if ctx, ok := routedContexts.Load(consumer); ok {
		return ctx.(context.Context), nil
	}
	if consumer == "" {
		return nil, fmt.Errorf("inboxtest: Routed: the consumer name is empty")
	}
	logger := watermill.NopLogger{}
	pubSub := gochannel.NewGoChannel(gochannel.Config{}, logger)
	defer pubSub.Close()
	router, err := message.NewRouter(message.RouterConfig{CloseTimeout: 10 * time.Second}, logger)
	if err != nil {
		return nil, fmt.Errorf("inboxtest: Routed: %w", err)
	}
	const topic = "inboxtest.routed" // a topic name that is no consumer name the test asked for
	got := make(chan context.Context, 1)
	router.AddConsumerHandler(consumer, topic, pubSub, func(msg *message.Message) error {
		select {
		case got <- msg.Context():
		default:
		}
		return nil
	})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- router.Run(ctx) }()
	select {
	case <-router.Running():
	case err := <-done:
		return nil, fmt.Errorf("inboxtest: Routed: the router stopped: %w", err)
	}
	if err := pubSub.Publish(topic, message.NewMessage(watermill.NewUUID(), nil)); err != nil {
		return nil, fmt.Errorf("inboxtest: Routed: %w", err)
	}
	var named context.Context
	select {
	case named = <-got:
	case <-time.After(10 * time.Second):
		return nil, fmt.Errorf("inboxtest: Routed: the router did not deliver its probe message")
	}
	cancel()
	<-done
	if message.HandlerNameFromCtx(named) != consumer {
		return nil, fmt.Errorf("inboxtest: Routed: this Watermill version does not name the handler in the message context")
	}
	actual, _ := routedContexts.LoadOrStore(consumer, named)
	return actual.(context.Context), nil
}

/* One libcurl multi handle driven by a libevent loop: curl's multi_socket_action pattern
 * (docs/examples/multi-event.c). The owner adds and removes easy handles on curl_loop_multi()
 * itself; after every curl_multi_socket_action() the loop calls `after`, where the owner reads
 * curl_multi_info_read() and finishes what is done, outside libcurl's callbacks. Loop context
 * only. */
#pragma once

#include <curl/curl.h>

struct event_base;
struct curl_loop;

typedef void curl_loop_after_cb(void *userdata);

/* base is borrowed. */
struct curl_loop *curl_loop_new(struct event_base *base, curl_loop_after_cb *after, void *userdata);
/* Every easy handle must have been removed. Accepts NULL. */
struct curl_loop *curl_loop_free(struct curl_loop *l);
CURLM *curl_loop_multi(const struct curl_loop *l);

-- The catalogue (ListEvents): what fans search events by, and the indexes
-- that answer a search without reading every event.
--
-- Every column is additive with a default, so a replica of the previous
-- release still creates events during a rollout (in UTC, published, with no
-- venue or flight). The two generated columns (the words searched and the
-- local date) make Postgres rewrite the events table once; it holds one row
-- per event, and the rewrite takes an ACCESS EXCLUSIVE lock for the
-- milliseconds a few thousand rows take.
--
-- booking_fold() folds text for matching: Latin letters with accents (the
-- Latin-1 Supplement, Latin Extended-A and -B and Latin Extended Additional,
-- where Vietnamese lives) become their bare letter, đ becomes d, then
-- lowercase. It is a translate(), not the unaccent extension, so that the
-- embedded Postgres (which ships no contrib extensions) folds the same way;
-- the service folds a query through the same function. Being part of a
-- generated column, it is a versioned object: changing it takes a new
-- migration that also recomputes the column.
CREATE FUNCTION booking_fold(value text) RETURNS text
    LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
    AS $$ SELECT lower(translate(value, 'ÀÁÂÃÄÅÇÈÉÊËÌÍÎÏÑÒÓÔÕÖØÙÚÛÜÝàáâãäåçèéêëìíîïñòóôõöøùúûüýÿĀāĂăĄąĆćĈĉĊċČčĎďĐđĒēĔĕĖėĘęĚěĜĝĞğĠġĢģĤĥĨĩĪīĬĭĮįİıĴĵĶķĹĺĻļĽľŁłŃńŅņŇňŌōŎŏŐőŔŕŖŗŘřŚśŜŝŞşŠšŢţŤťŨũŪūŬŭŮůŰűŲųŴŵŶŷŸŹźŻżŽžſƠơƯưǍǎǏǐǑǒǓǔǕǖǗǘǙǚǛǜǞǟǠǡǦǧǨǩǪǫǬǭǰǴǵǸǹǺǻȀȁȂȃȄȅȆȇȈȉȊȋȌȍȎȏȐȑȒȓȔȕȖȗȘșȚțȞȟȦȧȨȩȪȫȬȭȮȯȰȱȲȳḀḁḂḃḄḅḆḇḈḉḊḋḌḍḎḏḐḑḒḓḔḕḖḗḘḙḚḛḜḝḞḟḠḡḢḣḤḥḦḧḨḩḪḫḬḭḮḯḰḱḲḳḴḵḶḷḸḹḺḻḼḽḾḿṀṁṂṃṄṅṆṇṈṉṊṋṌṍṎṏṐṑṒṓṔṕṖṗṘṙṚṛṜṝṞṟṠṡṢṣṤṥṦṧṨṩṪṫṬṭṮṯṰṱṲṳṴṵṶṷṸṹṺṻṼṽṾṿẀẁẂẃẄẅẆẇẈẉẊẋẌẍẎẏẐẑẒẓẔẕẖẗẘẙẛẠạẢảẤấẦầẨẩẪẫẬậẮắẰằẲẳẴẵẶặẸẹẺẻẼẽẾếỀềỂểỄễỆệỈỉỊịỌọỎỏỐốỒồỔổỖỗỘộỚớỜờỞởỠỡỢợỤụỦủỨứỪừỬửỮữỰựỲỳỴỵỶỷỸỹ', 'AAAAAACEEEEIIIINOOOOOOUUUUYaaaaaaceeeeiiiinoooooouuuuyyAaAaAaCcCcCcCcDdDdEeEeEeEeEeGgGgGgGgHhIiIiIiIiIiJjKkLlLlLlLlNnNnNnOoOoOoRrRrRrSsSsSsSsTtTtUuUuUuUuUuUuWwYyYZzZzZzsOoUuAaIiOoUuUuUuUuUuAaAaGgKkOoOojGgNnAaAaAaEeEeIiIiOoOoRrRrUuUuSsTtHhAaEeOoOoOoOoYyAaBbBbBbCcDdDdDdDdDdEeEeEeEeEeFfGgHhHhHhHhHhIiIiKkKkKkLlLlLlLlMmMmMmNnNnNnNnOoOoOoOoPpPpRrRrRrRrSsSsSsSsSsTtTtTtTtUuUuUuUuUuVvVvWwWwWwWwWwXxXxYyZzZzZzhtwysAaAaAaAaAaAaAaAaAaAaAaAaEeEeEeEeEeEeEeEeIiIiOoOoOoOoOoOoOoOoOoOoOoOoUuUuUuUuUuUuUuYyYyYyYy')) $$;

-- The distinct words of folded text, for the GIN index (a query's words must
-- all be among them).
CREATE FUNCTION booking_words(value text) RETURNS text[]
    LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
    AS $$ SELECT array_remove(regexp_split_to_array(booking_fold(value), '[^[:alnum:]]+'), '') $$;

ALTER TABLE events
    ADD COLUMN time_zone text NOT NULL DEFAULT 'UTC',
    ADD COLUMN description text NOT NULL DEFAULT '',
    ADD COLUMN published boolean NOT NULL DEFAULT true,
    ADD COLUMN sale_opens_at timestamptz,
    ADD COLUMN venue_name text,
    ADD COLUMN venue_city text,
    ADD COLUMN venue_country_code text CHECK (venue_country_code ~ '^[A-Z]{2}$'),
    ADD COLUMN flight_code text,
    ADD COLUMN flight_origin text CHECK (flight_origin ~ '^[A-Z]{3}$'),
    ADD COLUMN flight_destination text CHECK (flight_destination ~ '^[A-Z]{3}$'),
    ADD COLUMN flight_departs_at timestamptz,
    ADD COLUMN flight_arrives_at timestamptz,
    -- The date the event starts on where it takes place (a flight at 00:30
    -- local on the 20th is on the 20th, whatever the date in UTC).
    ADD COLUMN local_date date GENERATED ALWAYS AS ((starts_at AT TIME ZONE time_zone)::date) STORED,
    ADD COLUMN search_words text[] GENERATED ALWAYS AS (
        booking_words(display_name || ' ' || coalesce(venue_name, '') || ' ' || coalesce(venue_city, '') || ' '
                      || coalesce(flight_code, '') || ' ' || coalesce(flight_origin, '') || ' '
                      || coalesce(flight_destination, ''))
    ) STORED;

-- One index per way of narrowing the catalogue, each over published events
-- only and ending in the listing's order (starts_at, event_id), so that a
-- page is an index range read in order and stopped at the page size:
-- everything, by kind, by route, by local date; words through GIN (a bitmap
-- of the matching events, sorted: a search matches few).
CREATE INDEX events_catalogue ON events (starts_at, event_id) WHERE published;
CREATE INDEX events_catalogue_kind ON events (kind, starts_at, event_id) WHERE published;
CREATE INDEX events_catalogue_route ON events (flight_origin, flight_destination, starts_at, event_id)
    WHERE published AND flight_origin IS NOT NULL;
CREATE INDEX events_catalogue_date ON events (local_date, starts_at, event_id) WHERE published;
CREATE INDEX events_catalogue_words ON events USING gin (search_words) WHERE published;

"""Training data for the name/address detector: gazetteers and labelled sentences, both generated
offline with Faker from a seed (imported only here, and only while the model is being built).

The sentences imitate what agent trajectories contain (chat requests, e-mails, tool results as JSON,
CSV and logs, code, stack traces) with person names and street addresses in slots whose token labels
are known because the generator inserts them. A third of the slots hold look-alikes that must stay
`O`: company names (which contain surnames), cities and countries on their own, job titles,
products and technologies, code identifiers, months and weekdays. The benchmark
(`bench/anonymize.py`) uses its own templates and another seed.
"""

from __future__ import annotations

import importlib
import random
import re
from collections.abc import Iterator

from faker import Faker

#: Token labels.
OUT, PER, ADDR = 0, 1, 2

# Honorifics: part of how people are addressed, not of who they are, so labelled OUT (O).
TITLES = (
    "Mr", "Mr.", "Mrs", "Mrs.", "Ms", "Ms.", "Miss", "Mx.", "Dr", "Dr.", "Prof.", "Prof", "Sir", "Dame",
    "Herr", "Frau", "Dipl.-Ing.", "M.", "Mme", "Mme.", "Mlle", "Sr.", "Sra.", "Srta.", "Don", "Doña", "Sig.",
    "Sig.ra", "Dott.", "Dott.ssa", "Dhr.", "Mevr.", "pani", "pan", "Hr.", "Fru", "Rev.", "Capt.",
)
NAME_SUFFIXES = ("Jr.", "Sr.", "II", "III", "PhD", "MD", "MBA", "Esq.")

# Street-type words in the languages of the training locales; together with Faker's own lists they
# form the street gazetteer (also the lowercase candidate trigger: "12 rue de la Paix").
STREET_WORDS = (
    "street", "st", "avenue", "ave", "av", "road", "rd", "lane", "ln", "drive", "dr", "boulevard", "blvd",
    "court", "ct", "place", "pl", "square", "sq", "terrace", "way", "close", "crescent", "highway", "hwy",
    "parkway", "pkwy", "alley", "row", "walk", "grove", "gardens", "mews", "apt", "suite", "unit", "floor",
    "straße", "strasse", "str", "gasse", "weg", "platz", "allee", "ring", "damm", "ufer", "chaussee",
    "rue", "chemin", "impasse", "allée", "quai", "cours", "route", "bd",
    "calle", "avenida", "paseo", "plaza", "camino", "carrer", "ronda", "travesía", "glorieta", "rambla",
    "via", "viale", "piazza", "corso", "vicolo", "largo", "strada", "contrada", "borgo",
    "straat", "laan", "plein", "gracht", "kade", "dreef", "singel", "steeg",
    "rua", "travessa", "praça", "alameda", "estrada", "rodovia",
    "ul", "ulica", "aleja", "al", "plac", "os", "osiedle",
    "gatan", "vägen", "gata", "vej", "gade", "veien", "gate", "tie", "katu",
    "ulice", "náměstí", "utca", "tér", "strada", "bulevardul", "calea", "aleea", "ulica", "trg",
    "jalan", "jl", "gang", "gg",
    # languages whose streets Faker has few of: Turkish, Hungarian, Icelandic, Estonian, Lithuanian,
    # Latvian, Danish/Norwegian/Swedish/Finnish, Portuguese, Czech, Dutch, German compounds
    "cadde", "caddesi", "cad", "sokak", "sokağı", "sk", "bulvar", "bulvarı", "mahallesi", "mah",
    "útja", "út", "körút", "köz", "sor", "sétány", "gata", "götu", "vegur", "stræti", "braut", "tún", "stígur",
    "tänav", "maantee", "põik", "puiestee", "gatvė", "prospektas", "iela", "prospekts", "allé", "stræde",
    "plads", "vænget", "vegen", "veien", "plass", "katu", "kuja", "polku", "väylä", "gränd", "torg", "stig",
    "třída", "nábřeží", "dijk", "hof", "stieg", "pfad", "markt", "zeile", "bakki", "bakken",
)

# Non-person words that come capitalized: technologies, products, code identifiers, headings.
TECH = (
    "Python", "Docker", "Kubernetes", "PostgreSQL", "Redis", "GitHub", "GitLab", "Linux", "Ubuntu", "macOS",
    "Windows", "React", "Django", "Flask", "FastAPI", "NumPy", "Pandas", "PyTorch", "TensorFlow", "AWS",
    "Azure", "Google Cloud", "Slack", "Jira", "Confluence", "Chrome", "Firefox", "Safari", "Excel",
    "PowerPoint", "Zoom", "Teams", "OpenAI", "Claude", "Llama", "Mistral", "Gemini", "Jupyter", "VS Code",
    "Vim", "Bash", "Git", "Postgres", "Bearer", "Token", "OAuth", "Kubectl", "Helm", "Istio", "Envoy", "Nginx",
    "Apache", "Kafka", "Spark", "Airflow", "Terraform", "Ansible", "Jenkins",
    "Heroku", "Vercel", "Stripe", "PayPal", "Shopify", "Salesforce", "Notion", "Figma", "Sentry", "Datadog",
    "Grafana", "Prometheus", "Celery", "RabbitMQ", "MongoDB", "MySQL", "SQLite", "Elasticsearch", "Node",
    "TypeScript", "JavaScript", "Rust", "Go", "Java", "Kotlin", "Swift", "Ruby", "Rails", "Laravel",
    "Android", "iOS", "iPhone", "Pixel", "Outlook", "Gmail", "Dropbox", "Trello", "Asana", "Bitbucket",
    "CloudFront", "Lambda", "DynamoDB", "BigQuery", "Snowflake", "Databricks", "Tableau", "Looker",
)
CODE_IDENTS = (
    "ValueError", "KeyError", "TypeError", "RuntimeError", "HTTPException", "DataFrame", "AsyncClient",
    "BaseModel", "Optional", "List", "Dict", "None", "True", "False", "JSONResponse", "Session", "Request",
    "Response", "Path", "Tensor", "Module", "Linear", "Exception", "AssertionError", "ImportError",
    "ConnectionError", "TimeoutError", "FileNotFoundError", "UserService", "OrderRepository", "AuthManager",
    "HttpClient", "Config", "Settings", "Logger", "Queue", "Thread", "Process", "Counter", "OrderedDict",
    "StringIO", "Decimal", "Enum", "Field", "Column", "Integer", "String", "Boolean", "Router", "Depends",
    "Traceback", "File", "Error", "Warning", "INFO", "DEBUG", "ERROR", "WARNING", "GET", "POST", "PUT",
    "DELETE", "HTTP", "JSON", "SQL", "API", "URL", "UTF", "TODO", "FIXME", "README", "Makefile", "Dockerfile",
)
MONTHS = ("January", "February", "March", "April", "May", "June", "July", "August", "September", "October",
          "November", "December", "Jan", "Feb", "Mar", "Apr", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")
DAYS = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday")
# Capitalized words that open sentences or label fields in agent text.
CAPS_WORDS = (
    "Please", "Thanks", "Hello", "Hi", "Dear", "Regards", "Best", "Cheers", "Note", "Summary", "Status",
    "Result", "Output", "Input", "Error", "Done", "Next", "Step", "Task", "Goal", "Plan", "Answer", "Question",
    "Customer", "User", "Admin", "Support", "Team", "Manager", "Order", "Invoice", "Payment", "Shipping",
    "Billing", "Account", "Profile", "Name", "Address", "Contact", "Owner", "Author", "Reviewer", "Assignee",
    "Subject", "From", "To", "Cc", "Date", "Sent", "Reply", "Forwarded", "Meeting", "Agenda", "Minutes",
)

# Capitalized words that precede a number without being a street: "Build 2024", "Timestamp 17...".
NUMBERED = (
    "Timestamp", "Build", "Order", "Line", "Step", "Port", "Version", "Ticket", "Issue", "Job", "Run", "Epoch",
    "Batch", "Row", "Page", "Chapter", "Room", "Gate", "Flight", "Table", "Item", "Task", "Case", "Invoice",
    "Release", "Sprint", "Phase", "Level", "Round", "Figure", "Section", "Worker", "Node", "Shard", "Replica",
    "Attempt", "Retry", "Checkpoint", "Iteration", "Commit", "Revision", "Request", "Session", "Thread",
    "Process", "Slot", "Lot", "Model", "Series", "Type", "Class", "Grade", "Region", "Zone", "Cluster", "Pod",
    "Container", "Volume", "Disk", "Exit", "Status", "Error", "Code", "Episode", "Season", "Week", "Day", "Year",
)

_TOKEN = re.compile(r"\w+(?:['’\-]\w+)*|\n|[^\w\s]")

# Training sentences. Slots: {PER} a person (maybe titled), {FIRST} a first name, {LASTT} title +
# surname, {ADDR} an address (one or several lines), {STREET} a street address, and O-labelled
# look-alikes {CO} company, {CITY}, {COUNTRY}, {JOB}, {TECH}, {CODE}, {MONTH}, {DAY}, {CAPS}, {NUM},
# {DATE}, {EMAIL}.
TEMPLATES = (
    # chat requests
    "Can you send the contract to {PER} before {DAY}?",
    "please ask {PER} to review the PR, {FIRST} is out until {MONTH}",
    "I spoke with {PER} from {CO} yesterday about the {TECH} migration.",
    "Book a table for {PER} and {PER} at 7pm.",
    "{FIRST}, could you check why {TECH} keeps crashing?",
    "My name is {PER} and I live at {ADDR}.",
    "Ship it to {ADDR}",
    "Update the delivery address to {STREET}, please.",
    "The package for {PER} was returned from {ADDR}.",
    "{CAPS}: {PER} asked whether {CO} can deliver to {STREET} by {DAY}.",
    "Remind {LASTT} about the meeting in {CITY} on {DAY}.",
    "Hi {FIRST}, thanks for the update on the {TECH} issue.",
    "Who is {PER}? The ticket was opened by {PER}.",
    "Find flights from {CITY} to {CITY} for {PER}.",
    "Write a cover letter for {PER}, a {JOB} at {CO}.",
    "Draft an email to {LASTT} declining the offer from {CO}.",
    "Can {FIRST} and {FIRST} join the call with {CO} on {DAY}?",
    "We moved to {CITY}, {COUNTRY} last {MONTH}.",
    "Our office is at {ADDR}; parking is behind the building.",
    "Send the invoice to {CO}, {ADDR}",
    "the new tenant at {STREET} is {PER}",
    "{PER} ({EMAIL}) reported the bug in {TECH}.",
    "Translate this for {FIRST}: the {CODE} happens when {TECH} restarts.",
    "Is {CITY} closer to {CITY} or {CITY}?",
    "Summarize the thread between {PER}, {PER} and {PER}.",
    "Set up a {TECH} account for {PER} ({JOB}).",
    "{CAPS} {NUM}: {TECH} failed on {DAY} with {CODE}.",
    "{CAPS}, I need the {TECH} logs from {MONTH} {NUM}.",
    # letters and e-mails
    "Dear {LASTT},\nthank you for your order #{NUM}. It will be shipped to:\n{ADDR}\nBest regards,\n{PER}",
    "From: {PER} <{EMAIL}>\nTo: {PER} <{EMAIL}>\nSubject: {CAPS} for {CO}",
    "Hello {FIRST},\n\nyour appointment with {LASTT} is confirmed for {DAY}.\n\n{CO}",
    "Kind regards,\n{PER}\n{JOB}, {CO}\n{ADDR}",
    "Sent on behalf of {PER}. {CO} | {STREET} | {CITY}",
    "Bonjour {FIRST}, merci pour votre message. {PER}",
    "Hallo {FIRST}, die Lieferung geht an {ADDR}. Viele Grüße, {PER}",
    "Ciao {FIRST}, ci vediamo a {CITY} {DAY}. {PER}",
    # tool results and structured data
    '{{"name": "{PER}", "email": "{EMAIL}", "address": "{ADDR1}"}}',
    '{{"customer": {{"first_name": "{FIRST}", "city": "{CITY}", "company": "{CO}"}}}}',
    '{{"assignee": "{PER}", "status": "open", "component": "{TECH}", "id": {NUM} }}',
    '{{"shipping_address": "{ADDR1}", "recipient": "{PER}", "items": {NUM}}}',
    "id,name,street,city\n{NUM},{PER},{STREET},{CITY}",
    "{NUM} | {PER} | {JOB} | {CO}",
    "name: {PER}\nrole: {JOB}\nlocation: {CITY}, {COUNTRY}",
    "Owner: {PER}\nTeam: {TECH} platform\nCreated: {DATE}",
    "Contact person: {PER}, {STREET}, {CITY}",
    "Address:\n{ADDR}",
    "Billing address: {ADDR1}. Shipping address: {ADDR1}.",
    "Author: {PER} <{EMAIL}>\nDate: {DATE}\n\n    Fix {CODE} in {TECH} client",
    "commit {NUM} by {PER}: bump {TECH} to 2.1",
    "[{DATE}] INFO user {FIRST} logged in from {CITY}",
    "2024-05-0{NUM} WARNING {CODE}: could not reach {TECH} for {PER}",
    "Search results: 1. {PER} - {JOB} at {CO} ({CITY}) 2. {PER} - {JOB}",
    "Found {NUM} contacts: {PER}, {PER}, {PER}.",
    "Weather in {CITY}: sunny, 21°C. {CAPS}: {DAY}",
    "Record {NUM}: {PER}, born in {CITY}, works for {CO}.",
    "Delivered to {PER} at {STREET} on {DAY}.",
    "Geocoded {ADDR1} -> lat 48.1, lon 11.5",
    # code
    'user = User(name="{PER}", city="{CITY}")',
    'customer = {{"name": "{PER}", "street": "{STREET}"}}',
    "raise {CODE}(f\"no such user: {{name}}\")  # reported by {FIRST}",
    "assert get_owner(repo) == \"{PER}\"",
    "def test_{NUM}(client: {CODE}) -> None:\n    resp = client.get(\"/users/{NUM}\")",
    "from {TECH} import {CODE}\nclient = {CODE}(timeout={NUM})",
    "# TODO({FIRST}): handle {CODE} from {TECH}",
    "Traceback (most recent call last):\n  File \"app.py\", line {NUM}, in main\n{CODE}: invalid literal",
    "class {CODE}({CODE}):\n    name: str = \"{PER}\"",
    "print(\"Hello, {FIRST}!\")",
    # look-alikes only (all O)
    "{CO} opened a new office in {CITY}, {COUNTRY}.",
    "The {JOB} from {CO} will present on {DAY}, {MONTH} {NUM}.",
    "{TECH} and {TECH} are both supported since version {NUM}.",
    "We use {TECH} on {TECH} with {TECH} for monitoring.",
    "{CODE}: {CODE} raised while calling {TECH}.",
    "{CAPS}: {TECH} deployment in {CITY} finished on {DAY}.",
    "Meeting notes ({MONTH} {NUM}): {CAPS} review, {TECH} upgrade, {CO} contract.",
    "The {CITY} data center runs {TECH}.",
    "Revenue for {CO} grew {NUM}% in {MONTH}.",
    "{CAPS} {CAPS}: see {CODE} in the {TECH} docs.",
    "Shipping to {COUNTRY} takes {NUM} days; {CITY} is faster.",
    # short and generic slots: the evidence is in the value itself
    "{PER}",
    "{ADDR}",
    "result: {PER}",
    "result: {ADDR1}",
    "-> {PER}",
    "got {PER} back from the lookup",
    "[{PER}]",
    "({PER})",
    "{PER}; {OTHER}",
    "{OTHER}, {PER}",
    "{OTHER} / {ADDR1}",
    "{ADDR1} / {OTHER}",
    "key={PER}",
    "The answer was {PER}.",
    "Looked up {PER} in the CRM.",
    "Looked up {STREET} on the map.",
    "entry {NUM}: {PER}, {OTHER}",
    "row {NUM}: {STREET}, {OTHER}",
    "{CW} {OTHER} and {PER}.",
    "{CW} {PER} {CW2} {OTHER}.",
    "{CW} {OTHER} {CW2} {STREET}.",
    "{CW} {ADDR1} {CW2}.",
    "{CW} by {PER} {CW2}.",
    "{CW} to {PER} yesterday.",
    "{CW} with {PER} and {PER}.",
    "{CW} from {ADDR1} at noon.",
    "{CW} {OTHER} {CW2}.",
    "{CW} {TECH} {CW2} {OTHER}.",
    "{CW}: {CODE} in {TECH}",
    "{CW} {CITY} {CW2} {COUNTRY}.",
    "{CW} the {CO} account {CW2}.",
    "{PER} {CW2} the ticket.",
    "{PER} and {PER} {CW2} the plan.",
    "{FIRST} {CW2} {OTHER}.",
    "assignee={PER} status=open",
    "reporter: {PER} | {OTHER}",
    "lives at {STREET}",
    "moved from {ADDR1} to {ADDR1}",
    "Authorization: Bearer {OTHER}",
    "{CAPS}: Basic {OTHER}",
    "Upgraded {TECH} to {VER} in the {CITY} cluster.",
    "{TECH} {VER} released; {TECH} {VER} is next.",
    "Running {TECH} {VER} on {TECH} {VER}",
    "The {COUNTRY} office ({CITY}) reports to {PER}.",
    "{NUMBERED} {NUM}: {CW2} {OTHER}",
    "see {NUMBERED} {NUM} for details",
    "{NUMBERED} {NUM} of {NUM} done, {NUMBERED} {NUM} next",
    "{NUMBERED} #{NUM} closed by {PER}",
    "{CAPS} {NUMBERED} {NUM} took {NUM} ms",
    "{TECH} {NUMBERED} {NUM} failed; {PER} is on call",
    # random context: surrounding words carry no signal by themselves
    "{W} {W} {PER} {W} {W}.",
    "{CW} {W} {PER} {W} {W} {W}.",
    "{CW} {W} {W} {FIRST} {W} {W}",
    "{W} {W} {LASTT} {W} {W} {W}",
    "{CW} {W} {PER}, {W} {W} {W}?",
    "{W} {W} {W} {ADDR1} {W} {W}.",
    "{CW} {W} {STREET} {W} {W}",
    "{CW} {W} {W} {CW2} {W} {W}.",
    "{CW} {W} {TECH} {W} {CITY} {W}.",
    "{W} {W} {CO} {W} {W} {W}",
    "{CW} {NUMBERED} {NUM} {W} {W}.",
    # table rows and records: names next to e-mails, phones and ids, no words around them
    "{NUM},{PER},{EMAIL},{PHONE}",
    "{NUM};{PER};{PHONE}",
    "{PER},{EMAIL},{CITY}",
    "{NUM}\t{PER}\t{PHONE}\t{CITY}",
    "{NUM},{LASTFIRST},{EMAIL}",
    "{PER} | {PHONE} | {EMAIL}",
    "name={PER}&email={EMAIL}",
    "{PER};{ADDR1};{PHONE}",
    # people as the subject of what they do, one-word names included
    "{FIRST} will {W} the {W}, {FIRST} {W}s it.",
    "{CAPS} ({DAY}): {FIRST} will {W} the {TECH} {W}, {FIRST} {W}s it.",
    "{FIRST} is {W} on the {TECH} {W} today.",
    "{LASTFIRST} wrote: the {TECH} {W} is {W} again",
    "{PER} wrote: {W} {W} {W}",
    "card {OTHER}, holder {PER}",
    "cardholder: {LASTFIRST}",
    "Best,\n{FIRST}",
    "Cheers,\n{PER}",
    "— {FIRST}",
    "{CW}, {FIRST}! {CW} {W} {W}.",
    "Dear {LASTT},\n\n{W} {W} {W} {STREET}.\n\nBest,\n{PER}",
    # streets on their own, before and after ordinary words
    "moving to {STREET} next {W}",
    "{W} {W} to {STREET} {W} {W}",
    "new address: {STREET}",
    '{{"customer": "{FIRST}", "shipping": "{STREET}"}}',
)


def stable(fake: Faker) -> Faker:
    """Make a Faker generator reproducible across processes: some locale data is a list built from a
    set (it_IT cities), whose order, and so what a seeded `random_element` picks, depends on
    PYTHONHASHSEED. Sorting those lists fixes the order without changing the distribution."""
    for provider in fake.providers:
        names = {attr for klass in type(provider).__mro__ for attr in vars(klass)}
        for attr in sorted(names):
            value = getattr(type(provider), attr, None)  # the attribute as the provider sees it
            if isinstance(value, list) and value and all(isinstance(x, str) for x in value[:8]):
                setattr(provider, attr, sorted(value))
    return fake


def _keys(obj: object) -> list[str]:
    if isinstance(obj, dict):
        return [str(k) for k in obj]
    if isinstance(obj, (list, tuple)):
        return [str(x) for x in obj]
    return []


def english_words() -> list[str]:
    """~2,500 common English words: Faker's lorem list and its parts-of-speech lists, plus the words
    of its company catch phrases."""
    from faker.providers.company.en_US import Provider as Company
    from faker.providers.lorem.en_US import Provider as Lorem

    words = set(Lorem.word_list)
    for group in getattr(Lorem, "parts_of_speech", {}).values():
        words.update(group)
    for group in (*Company.catch_phrase_words, *Company.bsWords):
        for phrase in group:
            words.update(w.lower() for w in re.findall(r"[A-Za-z]+", phrase))
    return sorted(w for w in words if w.isalpha())


def inflections(w: str) -> set[str]:
    """`w` with the common English suffixes: save -> saves, saved, saving, saver; ship -> shipped."""
    out = {w, w + "s"}
    if w.endswith("e"):
        out |= {w + "d", w[:-1] + "ing", w + "r"}
    else:
        out |= {w + "ed", w + "ing", w + "er"}
    if len(w) > 2 and w.endswith("y") and w[-2] not in "aeiou":
        out |= {w[:-1] + "ies", w[:-1] + "ied"}
    if w.endswith(("s", "x", "ch", "sh")):
        out.add(w + "es")
    if len(w) >= 3 and w[-1] in "bdgmnprt" and w[-2] in "aeiou" and w[-3] not in "aeiou":
        out |= {w + w[-1] + "ed", w + w[-1] + "ing"}
    return out


def gazetteers(locales: tuple[str, ...]) -> dict[str, list[str]]:
    """Lowercased word lists: first names, last names, street words, city words, titles, common words.

    Read from Faker's locale providers (name lists) and a few hundred generated streets and cities per
    locale; multi-word entries are split into words.
    """
    first: set[str] = set()
    last: set[str] = set()
    street: set[str] = {w.lower() for w in STREET_WORDS}
    city: set[str] = set()

    def words(s: str) -> list[str]:
        return [m.group(0).lower() for m in _TOKEN.finditer(s) if m.group(0)[0].isalpha()]

    for loc in locales:
        try:
            person = importlib.import_module(f"faker.providers.person.{loc}").Provider
        except ImportError:  # a locale with streets but no names of its own (en_AU)
            person = None
        for attr in ("first_names", "first_names_male", "first_names_female", "first_names_nonbinary"):
            for n in _keys(getattr(person, attr, ())):
                first.update(words(n))
        for attr in ("last_names", "last_names_male", "last_names_female", "last_names_nonbinary"):
            for n in _keys(getattr(person, attr, ())):
                last.update(words(n))
        try:
            address = importlib.import_module(f"faker.providers.address.{loc}").Provider
        except ImportError:
            continue
        for attr in ("street_suffixes", "street_prefixes", "street_suffixes_long", "street_suffixes_short"):
            for s in _keys(getattr(address, attr, ())):
                street.update(w for w in words(s) if len(w) > 1)
        for attr in ("cities", "real_city_names"):
            for c in sorted(_keys(getattr(address, attr, ())))[:3000]:
                city.update(words(c))
    from sklearn.feature_extraction.text import ENGLISH_STOP_WORDS

    common = {f for w in english_words() for f in inflections(w)} | set(ENGLISH_STOP_WORDS)
    common |= {w.lower() for w in CAPS_WORDS + MONTHS + DAYS}
    common |= {w.lower() for w in TECH + CODE_IDENTS if " " not in w}
    titles = {t.lower().rstrip(".") for t in TITLES} | {"mr", "mrs", "ms", "dr", "prof"}
    return {
        "first": sorted(first), "last": sorted(last), "street": sorted(street), "city": sorted(city),
        "title": sorted(titles), "common": sorted(common), "stop": sorted(ENGLISH_STOP_WORDS),
    }


class SentenceGenerator:
    """Labelled sentences: `(text, [(start, end, label)])` with spans of PER and ADDR values."""

    def __init__(self, locales: tuple[str, ...], seed: int, mutate_p: float = 0.25) -> None:
        self.rng = random.Random(seed)
        self.mutate_p = mutate_p
        self.common_words = english_words()
        self.locales = locales
        self.fakers: dict[str, Faker] = {}
        for i, loc in enumerate(locales):
            f = stable(Faker(loc))
            f.seed_instance(seed * 1000 + i)
            self.fakers[loc] = f
        # Faker's en_US lists back the look-alikes, so every locale sees the same distractors.
        self.en = self.fakers.get("en_US") or stable(Faker("en_US"))
        self.en.seed_instance(seed * 1000 + 999)

    def _faker(self) -> Faker:
        return self.fakers[self.rng.choice(self.locales)]

    def mutate(self, word: str) -> str:
        """A plausible name that no gazetteer has: one or two letters changed, shape kept. Teaches the
        model to find names from context and form, not only from its lists."""
        r = self.rng
        chars = list(word)
        idx = [i for i, c in enumerate(chars) if i > 0 and c.isalpha()]
        for i in r.sample(idx, min(len(idx), r.choice((1, 2)))):
            pool = "aeiouy" if chars[i].lower() in "aeiouy" else "bcdfghklmnprstvz"
            c = r.choice(pool)
            chars[i] = c.upper() if chars[i].isupper() else c
        return "".join(chars)

    def _name_part(self, word: str) -> str:
        return self.mutate(word) if self.rng.random() < self.mutate_p else word

    def person(self, f: Faker) -> list[tuple[str, int]]:
        """A person as (piece, label) pieces; titles and degree suffixes are O."""
        r = self.rng
        first, last = self._name_part(f.first_name()), self._name_part(f.last_name())
        u = r.random()
        if u < 0.38:
            parts = [(first, PER), (" ", PER), (last, PER)]
        elif u < 0.45:
            parts = [(first, PER), (" ", PER), (f.first_name(), PER), (" ", PER), (last, PER)]
        elif u < 0.51:
            parts = [(first, PER), (" ", PER), (r.choice("ABCDEFGHJKLMNPRSTW") + ".", PER), (" ", PER), (last, PER)]
        elif u < 0.55:
            parts = [(last, PER), (", ", PER), (first, PER)]
        elif u < 0.65:
            parts = [(r.choice(TITLES), OUT), (" ", OUT), (last, PER)]
        elif u < 0.75:
            parts = [(r.choice(TITLES), OUT), (" ", OUT), (first, PER), (" ", PER), (last, PER)]
        elif u < 0.83:
            parts = [(first, PER)]
        elif u < 0.86:
            parts = [(first, PER), (" ", PER), (last, PER), (" ", OUT), (r.choice(NAME_SUFFIXES), OUT)]
        elif u < 0.92:
            parts = [(first.upper(), PER), (" ", PER), (last.upper(), PER)]
        elif u < 0.95:
            parts = [(first.lower(), PER), (" ", PER), (last.lower(), PER)]
        else:
            parts = [(f.name(), PER)]  # Faker's own formats (may include particles or prefixes)
        return parts

    def address(self, f: Faker, one_line: bool = False, street_only: bool = False) -> str:
        a = self._address(f, one_line, street_only)
        if self.rng.random() < self.mutate_p:  # an unseen street or city name
            words = a.split(" ")
            i = self.rng.randrange(len(words))
            if len(words[i]) > 3 and words[i][0].isupper():
                words[i] = self.mutate(words[i])
            a = " ".join(words)
        return a

    def _address(self, f: Faker, one_line: bool, street_only: bool) -> str:
        r = self.rng
        if street_only:
            return f.street_address()
        u = r.random()
        if u < 0.35:
            a = f.street_address()
        elif u < 0.75:
            a = f.address()
        elif u < 0.88:
            a = f"{f.street_address()}, {f.city()}"
        else:
            a = f"{f.street_address()}, {f.postcode()} {f.city()}"
        if one_line or r.random() < 0.5:
            a = a.replace("\n", ", ")
        return a.strip()

    def fill(self, slot: str, f: Faker) -> list[tuple[str, int]]:
        r, en = self.rng, self.en
        if slot == "PER":
            return self.person(f)
        if slot == "FIRST":
            return [(self._name_part(f.first_name()), PER)]
        if slot == "LASTFIRST":
            return [(self._name_part(f.last_name()), PER), (", ", PER), (self._name_part(f.first_name()), PER)]
        if slot == "PHONE":
            return [(f.phone_number(), OUT)]
        if slot == "LASTT":
            return [(r.choice(TITLES), OUT), (" ", OUT), (self._name_part(f.last_name()), PER)]
        if slot == "ADDR":
            return [(self.address(f), ADDR)]
        if slot == "ADDR1":
            return [(self.address(f, one_line=True), ADDR)]
        if slot == "STREET":
            return [(self.address(f, street_only=True), ADDR)]
        if slot == "CO":
            return [((f if r.random() < 0.5 else en).company(), OUT)]
        if slot == "CITY":
            return [(f.city(), OUT)]
        if slot == "COUNTRY":
            return [(en.country(), OUT)]
        if slot == "JOB":
            return [(en.job(), OUT)]
        if slot == "TECH":
            return [(r.choice(TECH), OUT)]
        if slot == "CODE":
            return [(r.choice(CODE_IDENTS), OUT)]
        if slot == "MONTH":
            return [(r.choice(MONTHS), OUT)]
        if slot == "DAY":
            return [(r.choice(DAYS), OUT)]
        if slot == "CAPS":
            return [(r.choice(CAPS_WORDS), OUT)]
        if slot == "NUM":
            return [(str(r.randrange(1, 10 ** r.randrange(1, 6))), OUT)]
        if slot == "DATE":
            return [(en.date(), OUT)]
        if slot == "EMAIL":
            return [(f.email(), OUT)]
        if slot == "W":
            return [(r.choice(self.common_words), OUT)]
        if slot == "NUMBERED":
            return [(r.choice(NUMBERED), OUT)]
        if slot == "VER":
            return [(f"{r.randrange(1, 20)}.{r.randrange(0, 30)}" + (f".{r.randrange(0, 50)}" if r.random() < 0.5 else ""), OUT)]
        if slot == "OTHER":
            return [(self.other(f), OUT)]
        if slot in ("CW", "CW2"):
            w = r.choice(sorted(inflections(r.choice(self.common_words))))
            if slot == "CW" and r.random() < self.mutate_p:
                # An unknown capitalized word opening a sentence is not a name by itself.
                w = self.mutate(w)
            return [(w.capitalize() if slot == "CW" or r.random() < 0.2 else w, OUT)]
        raise KeyError(slot)

    def other(self, f: Faker) -> str:
        """A non-name value that sits next to names in real text: e-mail, IP, phone, id, date, URL."""
        r, en = self.rng, self.en
        u = r.randrange(10)
        if u == 0:
            return f.email()
        if u == 1:
            return en.ipv4()
        if u == 2:
            return f.phone_number()
        if u == 3:
            return en.uuid4()
        if u == 4:
            return en.date()
        if u == 5:
            return en.url()
        if u == 6:
            return f"#{r.randrange(10 ** 6)}"
        if u == 7:
            return en.sha1()[: r.randrange(7, 41)]
        if u == 8:
            return f"{r.randrange(1, 20)}.{r.randrange(0, 30)}.{r.randrange(0, 100)}"
        return en.iban()

    def sentence(self) -> tuple[str, list[tuple[int, int, int]]]:
        template = self.rng.choice(TEMPLATES)
        f = self._faker()
        parts = re.split(r"(\{[A-Z0-9]+\})", template.replace("{{", "\0").replace("}}", "\1"))
        text, spans = "", []
        for part in parts:
            if part.startswith("{") and part.endswith("}"):
                for piece, label in self.fill(part[1:-1], f):
                    if label != OUT:
                        spans.append((len(text), len(text) + len(piece), label))
                    text += piece
            else:
                text += part.replace("\0", "{").replace("\1", "}")
        return text, spans

    def sentences(self, n: int) -> Iterator[tuple[str, list[tuple[int, int, int]]]]:
        for _ in range(n):
            yield self.sentence()

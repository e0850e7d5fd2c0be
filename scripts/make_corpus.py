#!/usr/bin/env python3
"""Writes a plain-text English corpus of short children's stories, fables and descriptions (ASCII,
wrapped at 80 columns, a title line per story, blank lines between paragraphs) for the byte-level
GPT demo: real words, grammar, dialogue and recurring characters give it something to learn in a
few hundred steps, while templates over a few hundred words keep it from being one sentence
repeated. Seeded with random.Random(20261121): byte-for-byte deterministic. Standard library only.

Example: scripts/make_corpus.py --output data/corpus/tiny-stories.txt --bytes 327680
"""
import argparse
import os
import random
import textwrap

SEED = 20261121
WIDTH = 80

NAMES = {"he": "Tom Sam Ben Max Leo Jack Finn Oscar Hugo Toby Rufus Milo Otto Jasper Felix Arthur "
               "Noah Eli Theo Peter".split(),
         "she": "Mia Lily Anna Rosa Ella Ivy Lucy Nora Ruby Clara Daisy Hazel Maya Alice Grace "
                "Poppy Molly Zoe Iris Wren".split()}
PRONOUNS = {"he": ("he", "him", "his"), "she": ("she", "her", "her")}
ANIMALS = ("fox rabbit bear mouse owl duck goat cat dog pig frog hedgehog badger squirrel deer "
           "wolf otter lamb hen crow turtle beaver mole swan donkey").split()
FAST, SLOW = "rabbit deer fox squirrel dog wolf goat cat".split(), "turtle snail mole".split()
SIZES = "little small tiny big young old".split()
COLORS = "red brown grey white black golden spotted striped sandy".split()
MOODS = "brave shy clever kind curious lazy grumpy cheerful careful silly gentle proud".split()
FAMILY = ["mother", "father", "grandmother", "grandfather", "aunt", "uncle", "two sisters"]
ELDERS = [("mother", "she"), ("father", "he"), ("grandmother", "she"), ("grandfather", "he")]
HOMES = ["a village near a dark forest", "a cottage by the sea", "a farm on a green hill",
         "a small town beside a river", "a hollow under an old oak tree", "a valley between two "
         "mountains", "a house on a busy city street", "a house at the edge of the woods",
         "a garden full of roses", "a cottage on a little island"]
PLACES = ("the forest;the river;the market;the meadow;the old mill;the beach;the hill;the pond;"
          "the bakery;the library;the school;the bridge;the orchard;the cave;the harbor;the park;"
          "the lighthouse;the garden;the mountain;the big city;the sea").split(";")
OBJECTS = ("ball kite hat key book basket boat drum lamp box coat shell stone map bell cup scarf "
           "feather ring rope bucket umbrella whistle blanket").split()
PACKABLE = "apple map scarf blanket lamp whistle book cup rope umbrella coat".split()
SPOTS = ["under a pile of leaves", "behind the big rock", "at the edge of the pond", "inside an "
         "old boot", "in the branches of a tree", "under the kitchen table", "next to the garden "
         "gate", "on top of the haystack", "in a nest of sticks"]
SHELTERS = ["under a big tree", "in a dry cave", "inside an old barn", "beneath a stone bridge"]
TIMES = ["morning", "sunny morning", "cold winter evening", "rainy afternoon", "windy day",
         "bright summer day", "quiet night", "foggy morning", "warm spring day"]
SEASONS = {"spring": ["the grass is soft and new", "small flowers open in the sun",
                      "the birds build nests and sing", "warm rain falls in the afternoon"],
           "summer": ["the days are long and hot", "the air smells of sweet fruit",
                      "the bees hum over the flowers", "the children swim in the lake"],
           "autumn": ["the leaves turn red and gold", "the wind is cool and strong",
                      "apples fall from the trees", "mushrooms grow under the trees"],
           "winter": ["snow covers every roof", "the ponds freeze hard and white",
                      "smoke rises from the chimneys", "icicles hang from the windows"]}
EVENINGS = ["the sky turns pink and orange", "the first stars come out one by one",
            "the lamps are lit in every window", "the frogs begin to sing"]
ADJECTIVES = "quiet busy green bright peaceful wild lovely sleepy noisy".split()
GRAND = "beautiful wonderful peaceful exciting colorful".split()
SAY = ["said", "asked", "cried", "whispered", "shouted", "replied", "called"]
MORALS = ["slow and steady wins the race", "a friend in need is a friend indeed",
          "it is better to share than to keep everything for yourself", "pride comes before a "
          "fall", "hard work today brings comfort tomorrow", "kindness is never wasted",
          "it is wise to plan ahead", "small friends can be a great help",
          "it is good to ask for help", "a true friend is worth more than gold"]
# "base|past|ing rest" -> (base phrase, past phrase, -ing phrase)
ACTIVITIES = """play|played|playing in the sun; pick|picked|picking berries; sing|sang|singing
songs; read|read|reading stories; draw|drew|drawing pictures; climb|climbed|climbing trees;
dig|dug|digging holes; swim|swam|swimming in the pond; fly|flew|flying a kite; bake|baked|baking
bread; take|took|taking a nap; count|counted|counting the clouds; collect|collected|collecting
shells; dance|danced|dancing in the rain; chase|chased|chasing butterflies; watch|watched|watching
the boats; build|built|building little towers; jump|jumped|jumping over puddles;
eat|ate|eating sweet apples; tell|told|telling jokes; look|looked|looking at the stars"""
MAKES = [  # thing, first failure, the advice that fixes it
    ("cake", "the cake came out flat and burned", "bake it slowly and check it often"),
    ("kite", "the kite was too heavy and would not fly", "use thin sticks and light paper"),
    ("boat", "the boat tipped over and sank", "make the bottom wide and flat"),
    ("hat", "the hat was so big that it fell over the eyes", "measure the head first"),
    ("pie", "the pie was full of stones from the garden", "wash the fruit before using it"),
    ("basket", "the basket fell apart when it was picked up", "weave the reeds tightly"),
    ("birdhouse", "the roof of the birdhouse slid off", "use more nails on the roof")]


def verb_forms(item):  # "pick|picked|picking berries" -> ("pick berries", "picked berries", ...)
    head, _, rest = item.strip().partition(" ")
    return tuple(f"{form} {rest}" for form in head.split("|"))


VERBS = [verb_forms(item) for item in " ".join(ACTIVITIES.split()).split(";")]


def a(word):
    return ("an " if word[0] in "aeiou" else "a ") + word


def cap(text):
    return text[0].upper() + text[1:]


def title(text):
    small = {"a", "an", "the", "and", "of", "to", "in", "for", "on"}
    return " ".join(w if (i and w in small) else cap(w) for i, w in enumerate(text.split()))


def plural(noun):
    irregular = {"mouse": "mice", "deer": "deer", "wolf": "wolves"}
    return irregular.get(noun) or noun + ("es" if noun.endswith(("s", "sh", "ch", "x")) else "s")


class Character:
    def __init__(self, rng, animal=None, avoid=()):
        self.gender = rng.choice(("he", "she"))
        self.name = rng.choice([n for n in NAMES[self.gender] if n not in avoid])
        self.animal = animal or rng.choice(ANIMALS)
        self.size, self.color, self.mood = rng.choice(SIZES), rng.choice(COLORS), rng.choice(MOODS)
        self.he, self.him, self.his = PRONOUNS[self.gender]
        self.He, self.His = cap(self.he), cap(self.his)

    def desc(self, rng):
        s, c, m, an = self.size, self.color, self.mood, self.animal
        return a(rng.choice([f"{s} {c} {an}", f"{s} {an}", f"{m} little {an}", f"{c} {an}"]))


def opening(rng, c):
    home, d = rng.choice(HOMES), c.desc(rng)
    return rng.choice([
        f"Once upon a time, in {home}, there lived {d} named {c.name}.",
        f"Long ago, {d} named {c.name} lived in {home}.",
        f"There was once {d} called {c.name}. {c.He} lived in {home} with {c.his} "
        f"{rng.choice(FAMILY)}.",
        f"In {home}, there was {d} named {c.name}."])


def traits(rng, c, friend, obj):
    acts = rng.sample(VERBS, 5)
    solo = [f"{c.He} was very {c.mood} and loved to {acts[0][0]}.",
            f"Every morning, {c.he} went to {rng.choice(PLACES)} to {acts[1][0]}.",
            f"{c.name} was not very good at {acts[2][2]}, but {c.he} tried every day.",
            f"Last summer, {c.he} {acts[4][1]} almost every day."]
    out = rng.sample(solo, 2) + [f"{c.His} best friend was {friend.name}, "
                                 f"{a(friend.size + ' ' + friend.animal)} who lived near "
                                 f"{rng.choice(PLACES)}."]
    if rng.random() < 0.5:
        out.append(f"On sunny days, the two of them liked to {acts[3][0]} together.")
    if obj:
        out.append(f"{c.His} favorite thing in the whole world was {c.his} {rng.choice(COLORS)} "
                   f"{obj}.")
    return out


def lost_story(rng):
    h = Character(rng)
    f = Character(rng, avoid=(h.name,))
    obj, (p1, p2) = rng.choice(OBJECTS), rng.sample(PLACES, 2)
    return title(rng.choice([f"{h.name} and the Lost {obj}", f"Where Is {h.name}'s {obj}?",
                             f"The Missing {obj}"])), [
        [opening(rng, h)] + traits(rng, h, f, obj),
        [f"One {rng.choice(TIMES)}, {h.name} could not find {h.his} {obj}.",
         rng.choice([f"{h.He} looked under the bed and behind the door.",
                     f"{h.He} searched the whole house from top to bottom."]),
         f"{h.He} looked in {p1}, but it was not there."],
        [f'"Oh no!" {rng.choice(SAY[2:5])} {h.name}. "Where is my {obj}?"'],
        [f"Just then, {f.name} came by and saw that {h.name} was sad.",
         f'"What is wrong?" {f.he} asked.'],
        [f'"I lost my {obj}," said {h.name}. "I had it yesterday when I went to {p2}."'],
        [rng.choice([f'"Do not worry," said {f.name}. "I will help you find it."',
                     f'"Then let us go to {p2} and look," said {f.name}.'])],
        [f"So the two friends set off together. They walked to {p2} and asked "
         f"{Character(rng).desc(rng)} who was {rng.choice(VERBS)[2]}, but nobody had seen "
         f"the {obj}.", f"They looked high and low until the sun began to set."],
        [f"At last, {f.name} pointed and shouted. There, {rng.choice(SPOTS)}, was the {obj}!",
         f"{h.name} ran over and picked it up. It was a little dirty, but it was safe."],
        [f'"Thank you, {f.name}," said {h.name}. "You are a good friend."'],
        [rng.choice([f"That night, {h.name} went to sleep with {h.his} {obj} right beside {h.him}.",
                     f"From that day on, {h.name} always kept {h.his} {obj} in a safe place.",
                     f"And so {h.name} learned that {rng.choice(MORALS[7:10])}."])]]


def race_fable(rng):
    fast = Character(rng, animal=rng.choice(FAST))
    slow = Character(rng, animal=rng.choice(SLOW), avoid=(fast.name,))
    judge = Character(rng, animal="owl", avoid=(fast.name, slow.name))
    place, (nap, act) = rng.choice(PLACES), rng.sample(VERBS, 2)
    return title(f"The {fast.animal} and the {slow.animal}"), [
        [opening(rng, fast), f"{fast.He} was very fast, and {fast.he} was very proud of it."],
        [f'"I am the fastest animal in the world," {fast.he} said to everyone. '
         f'"Nobody can beat me."'],
        [f"One {rng.choice(TIMES)}, {a(slow.animal)} named {slow.name} looked up and said "
         f'quietly, "I will race you to {place}."'],
        [f"{fast.name} laughed so hard that {fast.he} fell over. But {fast.he} agreed, and all "
         f"the animals came to watch. {judge.name} the owl said, \"Ready, steady, go!\" and the "
         f"race began."],
        [f"{fast.name} ran very fast and was soon far ahead. Halfway to {place}, {fast.he} "
         f"looked back and could not see {slow.name} at all.",
         f'"I have plenty of time," {fast.he} thought. "I will {nap[0]} for a while."'],
        [f"Meanwhile, {slow.name} kept going, one small step at a time. {slow.He} did not "
         f"stop to rest, and {slow.he} did not stop to {act[0]}."],
        [f"{fast.name} {nap[1]} for so long that {fast.he} forgot all about the race. "
         f"When {fast.he} finally looked up, the sun was low in the sky. {fast.He} ran as fast "
         f"as {fast.he} could, but it was too late. {slow.name} had already reached {place}."],
        [f"And so {fast.name} learned that {rng.choice([MORALS[0], MORALS[3]])}."]]


def winter_fable(rng):
    kinds = rng.sample(ANIMALS, 2)
    busy = Character(rng, animal=kinds[0])
    lazy = Character(rng, animal=kinds[1], avoid=(busy.name,))
    act, food = rng.choice(VERBS), rng.choice(["nuts", "seeds", "apples", "berries", "acorns"])
    return title(f"The {busy.animal} and the {lazy.animal}"), [
        [f"All summer long, {busy.name} the {busy.animal} worked hard. Every day {busy.he} "
         f"carried {food} to {busy.his} home and stored them for the winter."],
        [f"{lazy.name} the {lazy.animal} spent the summer {act[2]}.",
         f'"Why do you work so hard?" {lazy.he} asked. "Come and {act[0]} with me."'],
        [f'"Winter is coming," replied {busy.name}. "I must be ready."'],
        [f"Soon the leaves fell and the snow came. {lazy.name} was cold and hungry, and "
         f"there was no food left anywhere. {lazy.He} knocked on {busy.name}'s door."],
        [f'"Please help me," {lazy.he} said. "I have nothing to eat."'],
        [f"{busy.name} was {rng.choice(['kind', 'gentle', 'good'])}, so {busy.he} shared "
         f"{busy.his} {food} with {lazy.name}. The next summer, they worked side by side."],
        [f"The moral of the story is that {rng.choice(MORALS[4:7])}."]]


def making_story(rng):
    h = Character(rng)
    friend = Character(rng, avoid=(h.name,))
    (thing, failure, advice), (elder, elder_he) = rng.choice(MAKES), rng.choice(ELDERS)
    return title(rng.choice([f"A {thing} for {friend.name}", f"{h.name} Makes a {thing}"])), [
        [opening(rng, h)] + traits(rng, h, friend, None),
        [f"One {rng.choice(TIMES)}, {h.name} remembered that it was {friend.name}'s birthday "
         f"the next day. {h.He} wanted to make {friend.him} {a(thing)}."],
        [f"{h.He} worked all afternoon. But when {h.he} was finished, {failure}.",
         f'"It is no good," {h.name} {rng.choice(["said", "cried", "whispered"])} sadly.'],
        [f"{h.His} {elder}, a wise old {h.animal}, came to see what was wrong.",
         f'"Try again," {elder_he} said. "This time, {advice}."'],
        [f"So {h.name} tried again. {h.He} did everything slowly and carefully, and this time "
         f"the {thing} was perfect."],
        [f'The next day, {h.name} gave the {thing} to {friend.name}. "Happy birthday!" {h.he} '
         f"said."],
        [f'"It is the best {thing} I have ever seen!" {rng.choice(["said", "cried"])} '
         f"{friend.name}, and {friend.he} gave {h.name} a big hug."]]


def journey_story(rng):
    h, act = Character(rng), rng.choice(VERBS)
    goal, packs = rng.choice(PLACES), rng.sample(PACKABLE, 3)
    paras = [[opening(rng, h), f"{h.He} had never been to {goal}, but {h.he} dreamed about it "
                               f"every night."],
             [f"One {rng.choice(TIMES)}, {h.name} packed {a(packs[0])}, {a(packs[1])}, and "
              f"{a(packs[2])} in {h.his} bag. \"I am going to {goal},\" {h.he} told {h.his} "
              f"{rng.choice(FAMILY)}. \"I will be back before dark.\""]]
    company = []
    for m in [Character(rng, avoid=(h.name,)) for _ in range(rng.randint(1, 3))]:
        paras.append([f"On the way, {h.he} met {m.desc(rng)} named {m.name}, who was "
                      f"{rng.choice(VERBS)[2]} near {rng.choice(PLACES)}.",
                      f'"Where are you going?" asked {m.name}.'])
        paras.append([f'"To {goal}," said {h.name}. "Would you like to come?"'])
        if rng.random() < 0.5:
            paras.append([f'"No, thank you," said {m.name}. "But be careful!"'])
        else:
            paras.append([f'"Yes, please!" said {m.name}, and {m.he} walked along too.'])
            company.append(m.name)
    who = h.name if not company else f"{h.name} and {h.his} new friend" + "s" * (len(company) > 1)
    they = "they" if company else h.he
    paras += [[f"Then the sky grew dark and a cold wind began to blow. {who} hid "
               f"{rng.choice(SHELTERS)} and waited until the storm was over. When {they} came "
               f"out, the sun was shining again and the path was clear."],
              [f"At last {who} reached {goal}. It was even more {rng.choice(GRAND)} than "
               f"{h.he} had imagined. {cap(they)} sat down and {act[1]} until it was time "
               f"to go home."],
              [f"When {h.name} came home, {h.he} told everyone about {h.his} trip. That night "
               f"{h.he} dreamed about {goal} again, and {h.he} was happy."]]
    return title(rng.choice([f"{h.name} Goes to {goal}", f"The Long Walk to {goal}"])), paras


def description(rng):
    place, season = rng.choice(PLACES), rng.choice(list(SEASONS))
    animals, (adj1, adj2) = rng.sample(ANIMALS, 3), rng.sample(ADJECTIVES, 2)
    facts, acts = rng.sample(SEASONS[season], 3), rng.sample(VERBS, 3)
    return title(f"{place} in {season}"), [
        [f"In {season}, {place} is {adj1} and {adj2}. {cap(facts[0])}, and {facts[1]}.",
         f"The {plural(animals[0])} {acts[0][0]} all day, and the {plural(animals[1])} "
         f"{acts[1][0]} near the water. {cap(facts[2])}."],
        [f"In the evening, {rng.choice(EVENINGS)}. An old {animals[2]} likes to sit by the path "
         f"and watch the children {acts[2][0]}. Everyone who lives near {place} says that "
         f"{season} is the best time of the year."]]


KINDS = [(lost_story, 3), (race_fable, 2), (winter_fable, 2), (making_story, 3),
         (journey_story, 3), (description, 2)]


def render(story_title, paras):
    body = "\n\n".join(textwrap.fill(" ".join(p), WIDTH) for p in paras)
    return f"{story_title}\n\n{body}\n\n\n"


def generate(target_bytes, seed=SEED):
    rng = random.Random(seed)
    makers = [maker for maker, weight in KINDS for _ in range(weight)]
    chunks, size = [], 0
    while size < target_bytes:
        chunks.append(render(*rng.choice(makers)(rng)))
        size += len(chunks[-1])
    return "".join(chunks).rstrip("\n") + "\n"


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--output", default="data/corpus/tiny-stories.txt")
    parser.add_argument("--bytes", type=int, default=327680, help="target size in bytes")
    args = parser.parse_args()
    text = generate(args.bytes)
    assert all(c == "\n" or " " <= c <= "~" for c in text), "corpus must be printable ASCII"
    os.makedirs(os.path.dirname(args.output) or ".", exist_ok=True)
    with open(args.output, "w", encoding="ascii", newline="\n") as out:
        out.write(text)
    print(f"wrote {len(text)} bytes to {args.output}")


if __name__ == "__main__":
    main()

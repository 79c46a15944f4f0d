//! Driver labs on rnic (docs/labs/README.md): each lab is a part of a driver to write,
//! a skeleton to start from (`exercises/`), a reference solution (`solutions/`), and a
//! checker that runs a solution against a deterministic device and judges it step by
//! step, with the cause of the first failure and the datasheet section to read.
//!
//! - [`nic`]: what lab code may do to a function ([`nic::Nic`]), the checkers' recording
//!   device ([`nic::LabDevice`]) and the adapter to a real function.
//! - [`report`]: the verdicts.
//! - One module per lab: its interface, its steps and its checker.

pub mod exercises;
pub mod lab1;
pub mod lab2;
pub mod lab3;
pub mod lab4;
pub mod lab8;
pub mod lab9;
pub mod nic;
pub mod report;
pub mod solutions;

use report::Report;

/// The labs, by number: their titles.
pub const LABS: [(u32, &str); 6] = [
    (1, lab1::TITLE),
    (2, lab2::TITLE),
    (3, lab3::TITLE),
    (4, lab4::TITLE),
    (8, lab8::TITLE),
    (9, lab9::TITLE),
];

/// Checks lab `lab`'s exercise (`solution == false`) or its reference solution.
pub fn check(lab: u32, solution: bool) -> Option<Report> {
    Some(match (lab, solution) {
        (1, false) => lab1::check(exercises::lab1::identify),
        (1, true) => lab1::check(solutions::lab1::identify),
        (2, false) => lab2::check(exercises::lab2::start),
        (2, true) => lab2::check(solutions::lab2::start),
        (3, false) => lab3::check(lab3::Code {
            create: exercises::lab3::create,
            connect: exercises::lab3::connect,
        }),
        (3, true) => lab3::check(lab3::Code {
            create: solutions::lab3::create,
            connect: solutions::lab3::connect,
        }),
        (4, false) => lab4::check(lab4::Code {
            post: exercises::lab4::post,
            poll: exercises::lab4::poll,
        }),
        (4, true) => lab4::check(lab4::Code {
            post: solutions::lab4::post,
            poll: solutions::lab4::poll,
        }),
        (8, false) => lab8::check(lab8::Code {
            migrate: exercises::lab8::migrate,
            depart: exercises::lab8::depart,
            adopt: exercises::lab8::adopt,
        }),
        (8, true) => lab8::check(lab8::Code {
            migrate: solutions::lab8::migrate,
            depart: solutions::lab8::depart,
            adopt: solutions::lab8::adopt,
        }),
        (9, false) => lab9::check(lab9::Code {
            open: exercises::lab9::open,
            send: exercises::lab9::send,
            reclaim: exercises::lab9::reclaim,
            recv: exercises::lab9::recv,
        }),
        (9, true) => lab9::check(lab9::Code {
            open: solutions::lab9::open,
            send: solutions::lab9::send,
            reclaim: solutions::lab9::reclaim,
            recv: solutions::lab9::recv,
        }),
        _ => return None,
    })
}
